// Jobs and consumers over RPC: anonymous and named jobs in every processing
// mode, reuse rules and their errors, static sharding from the configured
// worker list, client heartbeats (task list, unchanged list not resent, job
// finished), release, job GC, client timeout, and the errors a consumer gets
// after a restart without fault-tolerant mode.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>

#include "tests/dataservice/ds_test_util.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using rpc::ProcessingMode;
using rpc::TargetWorkers;

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST(Jobs, AnonymousJobsAreAlwaysNewAndNamedJobsAreJoinedWithANewClientId) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  uint64_t dataset = *client.RegisterDataset({.definition = "d"});
  auto a = client.GetOrCreateJob({.dataset_id = dataset});
  auto b = client.GetOrCreateJob({.dataset_id = dataset});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->job_id, b->job_id);
  EXPECT_EQ(a->incarnation, client.Incarnation());

  auto named = client.GetOrCreateJob({.dataset_id = dataset, .name = "train"});
  auto joined = client.GetOrCreateJob({.dataset_id = dataset, .name = "train"});
  ASSERT_TRUE(named.ok() && joined.ok());
  EXPECT_EQ(named->job_id, joined->job_id);
  EXPECT_NE(named->job_client_id, joined->job_client_id);
  auto other_index =
      client.GetOrCreateJob({.dataset_id = dataset, .name = "train", .name_index = 1});
  EXPECT_NE(other_index->job_id, named->job_id);
  auto jobs = client.ListJobs();
  ASSERT_EQ(jobs->size(), 4u);
}

TEST(Jobs, ReusingANamedJobWithAnotherModeOrTargetNamesBoth) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  uint64_t dataset = *client.RegisterDataset({.definition = "d", .indexed_splits = 10});
  ASSERT_TRUE(
      client.GetOrCreateJob({.dataset_id = dataset, .mode = ProcessingMode::DYNAMIC, .name = "j"})
          .ok());
  auto mode =
      client.GetOrCreateJob({.dataset_id = dataset, .mode = ProcessingMode::OFF, .name = "j"});
  ASSERT_FALSE(mode.ok());
  EXPECT_EQ(mode.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(mode.status(), "DYNAMIC") && Contains(mode.status(), "OFF"))
      << mode.status().message();
  auto target = client.GetOrCreateJob({.dataset_id = dataset,
                                       .mode = ProcessingMode::DYNAMIC,
                                       .name = "j",
                                       .target = TargetWorkers::LOCAL});
  ASSERT_FALSE(target.ok());
  EXPECT_TRUE(Contains(target.status(), "AUTO") && Contains(target.status(), "LOCAL"))
      << target.status().message();
}

TEST(Jobs, BadRequestsGetClearErrors) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto unknown = client.GetOrCreateJob({.dataset_id = 99});
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(unknown.status(), "dataset 99"));
  uint64_t plain = *client.RegisterDataset({.definition = "no splits"});
  auto dynamic = client.GetOrCreateJob({.dataset_id = plain, .mode = ProcessingMode::DYNAMIC});
  EXPECT_EQ(dynamic.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(dynamic.status(), "no split source")) << dynamic.status().message();
  for (ProcessingMode mode : {ProcessingMode::FILE, ProcessingMode::DATA,
                              ProcessingMode::FILE_OR_DATA, ProcessingMode::HINT}) {
    auto sharded = client.GetOrCreateJob({.dataset_id = plain, .mode = mode});
    EXPECT_EQ(sharded.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(sharded.status(), "--worker-addresses")) << sharded.status().message();
  }
}

TEST(Jobs, EveryProcessingModeGivesEachWorkerATask) {
  DispatcherProcess dispatcher({.extra_flags = {"--worker-addresses=w0,w1"}});
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker w0(loop, dispatcher.address(), "w0");
  SimWorker w1(loop, dispatcher.address(), "w1");
  ASSERT_TRUE(w0.Heartbeat().ok());
  ASSERT_TRUE(w1.Heartbeat().ok());
  SimWorker stranger(loop, dispatcher.address(), "w9");
  auto refused = stranger.Heartbeat();
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(refused, "w9")) << refused.message();

  uint64_t dataset = *client.RegisterDataset({.definition = "d", .indexed_splits = 4});
  for (ProcessingMode mode :
       {ProcessingMode::OFF, ProcessingMode::DYNAMIC, ProcessingMode::FILE, ProcessingMode::DATA,
        ProcessingMode::FILE_OR_DATA, ProcessingMode::HINT}) {
    auto job = client.GetOrCreateJob({.dataset_id = dataset, .mode = mode});
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    auto heartbeat = client.ClientHeartbeat(job->job_client_id);
    ASSERT_TRUE(heartbeat.ok());
    ASSERT_EQ(heartbeat->tasks.size(), 2u);
    for (const TaskView& task : heartbeat->tasks) {
      EXPECT_EQ(task.processing_mode, mode);
      EXPECT_EQ(task.dataset_id, dataset);
      EXPECT_EQ(task.transfer_address, task.worker_address + "/transfer");
      bool sharded = mode != ProcessingMode::OFF && mode != ProcessingMode::DYNAMIC;
      EXPECT_EQ(task.worker_index, sharded ? (task.worker_address == "w0" ? 0 : 1) : -1);
      EXPECT_EQ(task.num_workers, sharded ? 2u : 0u);
      EXPECT_EQ(task.num_split_providers, mode == ProcessingMode::DYNAMIC ? 1u : 0u);
    }
  }
  ASSERT_TRUE(w0.Heartbeat().ok());
  EXPECT_EQ(w0.tasks().size(), 6u);
}

TEST(Jobs, ClientHeartbeatSkipsAnUnchangedTaskListAndReportsTheJobFinished) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  uint64_t dataset = *client.RegisterDataset({.definition = "d"});
  auto job = *client.GetOrCreateJob({.dataset_id = dataset});
  auto first = *client.ClientHeartbeat(job.job_client_id);
  EXPECT_TRUE(first.changed);
  ASSERT_EQ(first.tasks.size(), 1u);
  EXPECT_EQ(first.tasks[0].worker_address, "w");
  EXPECT_FALSE(first.job_finished);
  EXPECT_EQ(first.block_round, -1);
  auto same = *client.ClientHeartbeat(job.job_client_id, -1, -1, first.version);
  EXPECT_FALSE(same.changed);
  EXPECT_TRUE(same.tasks.empty());
  EXPECT_EQ(same.version, first.version);

  SimWorker late(loop, dispatcher.address(), "late");
  ASSERT_TRUE(late.Heartbeat().ok());
  ASSERT_EQ(late.tasks().size(), 1u);
  auto grown = *client.ClientHeartbeat(job.job_client_id, -1, -1, first.version);
  EXPECT_TRUE(grown.changed);
  EXPECT_EQ(grown.tasks.size(), 2u);

  ASSERT_TRUE(worker.Heartbeat().ok());
  ASSERT_TRUE(worker.Complete({worker.TaskOf(job.job_id)->task_id}).ok());
  EXPECT_FALSE(client.ClientHeartbeat(job.job_client_id)->job_finished);
  ASSERT_TRUE(late.Complete({late.TaskOf(job.job_id)->task_id}).ok());
  auto done = *client.ClientHeartbeat(job.job_client_id, -1, -1, grown.version);
  EXPECT_TRUE(done.job_finished);
  EXPECT_TRUE(done.changed);
  for (const TaskView& task : done.tasks) EXPECT_TRUE(task.finished);
  // Finished tasks are withdrawn from the worker at its next heartbeat.
  auto again = worker.Heartbeat();
  EXPECT_TRUE(again.ok());
}

TEST(Jobs, ReleasingTwiceSucceedsAndAReleasedClientIsUnknownToHeartbeats) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  uint64_t dataset = *client.RegisterDataset({.definition = "d"});
  auto job = *client.GetOrCreateJob({.dataset_id = dataset, .name = "n"});
  EXPECT_EQ(client.ListJobClients()->size(), 1u);
  ASSERT_TRUE(client.ReleaseJobClient(job.job_client_id).ok());
  EXPECT_TRUE(client.ListJobClients()->empty());
  // A retry after a lost reply: released already, so it succeeds.
  EXPECT_TRUE(client.ReleaseJobClient(job.job_client_id).ok());
  EXPECT_TRUE(client.ListJobClients()->empty());
  const uint64_t never_issued = job.job_client_id + 1000;
  auto unknown = client.ReleaseJobClient(never_issued);
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(unknown, "job client " + std::to_string(never_issued)));
  auto heartbeat = client.ClientHeartbeat(job.job_client_id);
  EXPECT_EQ(heartbeat.status().code(), StatusCode::kNotFound);
}

TEST(Jobs, AJobWithoutClientsIsGarbageCollectedAndItsClientsToldSo) {
  // `kept` must outlive the client timeout while the test heartbeats it: with
  // two suites on two cores a process can stall for over a second, so the
  // timeout is several seconds (it failed once at 1 s).
  DispatcherProcess dispatcher(
      {.extra_flags = {"--job-gc-check-interval-ms=20", "--job-gc-timeout-ms=50",
                       "--client-timeout-ms=5000"}});
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  uint64_t dataset = *client.RegisterDataset({.definition = "d"});
  auto kept = *client.GetOrCreateJob({.dataset_id = dataset, .name = "kept"});
  auto job = *client.GetOrCreateJob({.dataset_id = dataset, .name = "gc"});
  auto second = *client.GetOrCreateJob({.dataset_id = dataset, .name = "gc"});
  ASSERT_TRUE(client.ReleaseJobClient(job.job_client_id).ok());
  // `second` stops heartbeating: the client timeout releases it, then job GC.
  bool collected = WaitUntil(
      [&] {
        EXPECT_TRUE(client.ClientHeartbeat(kept.job_client_id).ok());
        auto jobs = client.ListJobs();
        for (const JobView& view : *jobs) {
          if (view.job_id == job.job_id) return view.garbage_collected;
        }
        return false;
      },
      loop);
  ASSERT_TRUE(collected);
  auto heartbeat = client.ClientHeartbeat(second.job_client_id);
  ASSERT_FALSE(heartbeat.ok());
  EXPECT_EQ(heartbeat.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(heartbeat.status(), "garbage-collected")) << heartbeat.status().message();
  // The kept job is alive; the worker is told to drop the collected job's task.
  EXPECT_TRUE(client.ClientHeartbeat(kept.job_client_id).ok());
  ASSERT_TRUE(WaitUntil([&] { return !worker.pushes().deleted.empty(); }, loop));
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_FALSE(worker.TaskOf(job.job_id).has_value());
  EXPECT_TRUE(worker.TaskOf(kept.job_id).has_value());
  // The name may be taken again by a new job.
  auto reborn = client.GetOrCreateJob({.dataset_id = dataset, .name = "gc"});
  ASSERT_TRUE(reborn.ok());
  EXPECT_NE(reborn->job_id, job.job_id);
}

TEST(Jobs, WithFaultTolerantModeAClientSurvivesARestart) {
  TempDir dir;
  JobIds job;
  {
    DispatcherProcess dispatcher({.work_dir = dir.File("work")});
    ClientLoop loop;
    DsClient client(loop, dispatcher.address());
    job = *client.GetOrCreateJob({.dataset_id = *client.RegisterDataset({.definition = "d"})});
    dispatcher.process().Signal(SIGKILL);
    dispatcher.process().Wait(std::chrono::seconds(10));
  }
  DispatcherProcess dispatcher({.work_dir = dir.File("work")});
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto heartbeat = client.ClientHeartbeat(job.job_client_id);
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status().ToString();
  EXPECT_NE(heartbeat->incarnation, job.incarnation);
}

TEST(Jobs, WithoutFaultTolerantModeARestartForgetsAndSaysWhy) {
  TempDir dir;
  JobIds job;
  uint64_t dataset;
  uint64_t task_id = 0;
  {
    DispatcherProcess dispatcher(
        {.work_dir = dir.File("work"), .extra_flags = {"--fault-tolerant-mode=false"}});
    ClientLoop loop;
    DsClient client(loop, dispatcher.address());
    dataset = *client.RegisterDataset({.definition = "d", .indexed_splits = 3});
    job = *client.GetOrCreateJob({.dataset_id = dataset, .mode = ProcessingMode::DYNAMIC});
    SimWorker worker(loop, dispatcher.address(), "w");
    ASSERT_TRUE(worker.Heartbeat().ok());
    ASSERT_TRUE(worker.TaskOf(job.job_id).has_value());
    task_id = worker.TaskOf(job.job_id)->task_id;
    ASSERT_TRUE(client.GetSplit(task_id, 0, 1).ok());
    ASSERT_TRUE(dispatcher.Terminate().has_value());
  }
  DispatcherProcess dispatcher(
      {.work_dir = dir.File("work"), .extra_flags = {"--fault-tolerant-mode=false"}});
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto heartbeat = client.ClientHeartbeat(job.job_client_id);
  ASSERT_FALSE(heartbeat.ok());
  EXPECT_EQ(heartbeat.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(heartbeat.status(), "fault-tolerant")) << heartbeat.status().message();
  // A worker of the previous run asking for its task's next split is told why.
  auto split = client.GetSplit(task_id, 0, 2);
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(split.status(), "task " + std::to_string(task_id)))
      << split.status().message();
  EXPECT_TRUE(Contains(split.status(), "fault-tolerant")) << split.status().message();
  EXPECT_EQ(client.GetDatasetDef(dataset).status().code(), StatusCode::kNotFound);
  // Ids are never reused: a new job and client get fresh ones.
  uint64_t again = *client.RegisterDataset({.definition = "d"});
  EXPECT_GT(again, dataset);
  auto fresh = *client.GetOrCreateJob({.dataset_id = again});
  EXPECT_GT(fresh.job_id, job.job_id);
  EXPECT_GT(fresh.job_client_id, job.job_client_id);
}

TEST(Jobs, MaybeRemoveTaskNeedsEveryConsumerAtOneRound) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  uint64_t dataset = *client.RegisterDataset({.definition = "d"});
  auto plain = *client.GetOrCreateJob({.dataset_id = dataset});
  auto rr = *client.GetOrCreateJob({.dataset_id = dataset, .name = "rr", .num_consumers = 2});
  ASSERT_TRUE(worker.Heartbeat().ok());
  uint64_t plain_task = worker.TaskOf(plain.job_id)->task_id;
  uint64_t rr_task = worker.TaskOf(rr.job_id)->task_id;

  auto not_rr = client.MaybeRemoveTask(plain_task, 0, 0);
  EXPECT_EQ(not_rr.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(not_rr.status(), "not round robin"));
  EXPECT_EQ(client.MaybeRemoveTask(rr_task, 2, 0).status().code(), StatusCode::kInvalidArgument);

  EXPECT_FALSE(*client.MaybeRemoveTask(rr_task, 0, 5));
  EXPECT_FALSE(*client.MaybeRemoveTask(rr_task, 0, 5));  // the same consumer twice is not two
  EXPECT_FALSE(*client.MaybeRemoveTask(rr_task, 1, 6));  // another round: starts over
  EXPECT_TRUE(*client.MaybeRemoveTask(rr_task, 0, 6));
  EXPECT_TRUE(*client.MaybeRemoveTask(rr_task, 1, 6));  // already gone
  ASSERT_TRUE(WaitUntil(
      [&] {
        return std::count(worker.pushes().deleted.begin(), worker.pushes().deleted.end(), rr_task) >
               0;
      },
      loop));
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_FALSE(worker.TaskOf(rr.job_id).has_value());
  EXPECT_TRUE(client.ClientHeartbeat(rr.job_client_id)->tasks.empty());
}

}  // namespace
}  // namespace dispatch::testing
