// Tasks routed by dataset kind over RPC: a worker announcing kinds
// (workerHeartbeatRequest.datasetKinds) gets tasks only of datasets of those
// kinds (the first word of the definition), one announcing none gets every
// job; a job no worker can produce waits and is counted (jobsWithoutWorker);
// the kinds survive a dispatcher restart (journal replay); a bad kind is an
// InvalidArgument that registers nothing.
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "tests/dataservice/ds_test_util.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

uint64_t JobsWithoutWorker(ClientLoop& loop, DsClient& client) {
  auto stats = Try(loop, client.dispatcher().getServerStatsRequest().send().then([](auto r) {
    return r.getStats().getJobsWithoutWorker();
  }));
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  return stats.ok() ? *stats : ~uint64_t{0};
}

TEST(TaskRouting, WorkersGetTasksOnlyOfTheKindsTheyAnnounce) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker cpp(loop, dispatcher.address(), "cpp");
  cpp.set_dataset_kinds({"range", "lines", "synthetic"});
  SimWorker py(loop, dispatcher.address(), "py");
  py.set_dataset_kinds({"python", "range"});
  SimWorker old(loop, dispatcher.address(), "old");  // announces nothing
  ASSERT_TRUE(cpp.Heartbeat().ok());
  ASSERT_TRUE(py.Heartbeat().ok());
  ASSERT_TRUE(old.Heartbeat().ok());

  const uint64_t python =
      *client.RegisterDataset({.definition = "python fn=AAAA format=pickle", .indexed_splits = 4});
  const uint64_t range = *client.RegisterDataset({.definition = "range count=10 splits=2"});
  const uint64_t opaque = *client.RegisterDataset({.definition = std::string("\x01\x02graph", 7)});
  auto python_job = *client.GetOrCreateJob(
      {.dataset_id = python, .mode = rpc::ProcessingMode::DYNAMIC});
  auto range_job = *client.GetOrCreateJob({.dataset_id = range});
  auto opaque_job = *client.GetOrCreateJob({.dataset_id = opaque});
  for (SimWorker* worker : {&cpp, &py, &old}) ASSERT_TRUE(worker->Heartbeat().ok());

  EXPECT_FALSE(cpp.TaskOf(python_job.job_id).has_value()) << "cpp cannot produce 'python'";
  EXPECT_TRUE(py.TaskOf(python_job.job_id).has_value());
  EXPECT_TRUE(old.TaskOf(python_job.job_id).has_value()) << "no kinds announced: every job";
  for (SimWorker* worker : {&cpp, &py, &old}) {
    EXPECT_TRUE(worker->TaskOf(range_job.job_id).has_value()) << worker->address();
    EXPECT_TRUE(worker->TaskOf(opaque_job.job_id).has_value()) << worker->address();
  }
  // Nothing was pushed to cpp for the python job either.
  for (const TaskView& started : cpp.pushes().started) EXPECT_NE(started.job_id, python_job.job_id);
  EXPECT_EQ(JobsWithoutWorker(loop, client), 0u);

  // DYNAMIC: every split goes to the capable tasks, once.
  const uint64_t task = py.TaskOf(python_job.job_id)->task_id;
  auto splits = client.GetSplit(task, 0, 1, 10);
  ASSERT_TRUE(splits.ok()) << splits.status().ToString();
  EXPECT_EQ(splits->indices, (std::vector<uint64_t>{0, 1, 2, 3}));
}

TEST(TaskRouting, AJobNoWorkerCanProduceWaitsUntilOneRegisters) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker cpp(loop, dispatcher.address(), "cpp");
  cpp.set_dataset_kinds({"range"});
  ASSERT_TRUE(cpp.Heartbeat().ok());
  const uint64_t python = *client.RegisterDataset({.definition = "python fn=AAAA"});
  auto job = client.GetOrCreateJob({.dataset_id = python});
  ASSERT_TRUE(job.ok()) << "a job no worker can produce is not an error";
  ASSERT_TRUE(cpp.Heartbeat().ok());
  EXPECT_FALSE(cpp.TaskOf(job->job_id).has_value());
  EXPECT_EQ(JobsWithoutWorker(loop, client), 1u);
  auto heartbeat = client.ClientHeartbeat(job->job_client_id);
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status().ToString();
  EXPECT_TRUE(heartbeat->tasks.empty());
  EXPECT_FALSE(heartbeat->job_finished);

  SimWorker py(loop, dispatcher.address(), "py");
  py.set_dataset_kinds({"python"});
  ASSERT_TRUE(py.Heartbeat().ok());
  EXPECT_TRUE(py.TaskOf(job->job_id).has_value()) << "a worker registering later gets the job";
  EXPECT_EQ(JobsWithoutWorker(loop, client), 0u);
  heartbeat = client.ClientHeartbeat(job->job_client_id);
  ASSERT_TRUE(heartbeat.ok());
  ASSERT_EQ(heartbeat->tasks.size(), 1u);
  EXPECT_EQ(heartbeat->tasks[0].worker_address, "py");
}

TEST(TaskRouting, AnnouncedKindsSurviveARestart) {
  TempDir dir;
  uint64_t python;
  {
    DispatcherProcess dispatcher({.work_dir = dir.File("work")});
    ClientLoop loop;
    DsClient client(loop, dispatcher.address());
    SimWorker cpp(loop, dispatcher.address(), "cpp", 5);
    cpp.set_dataset_kinds({"range"});
    ASSERT_TRUE(cpp.Heartbeat().ok());
    python = *client.RegisterDataset({.definition = "python fn=AAAA"});
    dispatcher.process().Signal(SIGKILL);
    dispatcher.process().Wait(std::chrono::seconds(10));
  }
  DispatcherProcess dispatcher({.work_dir = dir.File("work")});
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  // The replayed registration routes before the worker says anything again.
  auto job = client.GetOrCreateJob({.dataset_id = python});
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(JobsWithoutWorker(loop, client), 1u);
  SimWorker cpp(loop, dispatcher.address(), "cpp", 5);  // the same process: no new registration
  ASSERT_TRUE(cpp.Heartbeat().ok());
  EXPECT_FALSE(cpp.TaskOf(job->job_id).has_value());
}

TEST(TaskRouting, AnEmptyDatasetKindIsRefusedAndRegistersNothing) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "w");
  worker.set_dataset_kinds({"range", ""});
  Status status = worker.Heartbeat();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("dataset kind must not be empty"), std::string::npos)
      << status.ToString();
  EXPECT_TRUE(client.GetWorkers()->empty());
}

}  // namespace
}  // namespace dispatch::testing
