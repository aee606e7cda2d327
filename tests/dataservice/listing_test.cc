// Listings (what dispatchctl shows) and the restart identity: every
// data-service reply carries the dispatcher's incarnation, and the binary's
// --help documents every data-service flag.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "tests/dataservice/ds_test_util.h"
#include "tests/support/subprocess.h"

namespace dispatch::testing {
namespace {

using rpc::ProcessingMode;

TEST(Listings, ShowWorkersDatasetsJobsTasksAndClients) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  uint64_t dataset =
      *client.RegisterDataset({.definition = "d", .indexed_splits = 12, .element_spec = "s"});
  auto job =
      *client.GetOrCreateJob({.dataset_id = dataset, .mode = ProcessingMode::DYNAMIC, .name = "n"});
  auto rr = *client.GetOrCreateJob({.dataset_id = dataset, .name = "rr", .num_consumers = 2});
  SimWorker late(loop, dispatcher.address(), "late");
  ASSERT_TRUE(late.Heartbeat().ok());  // a pending task for the round-robin job

  auto workers = *client.GetWorkers();
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[0].address, "w");
  EXPECT_EQ(workers[0].transfer_address, "w/transfer");
  EXPECT_TRUE(workers[0].connected);
  EXPECT_EQ(workers[0].num_tasks, 2u);

  auto datasets = client.dispatcher().listDatasetsRequest().send().wait(loop.wait_scope());
  ASSERT_EQ(datasets.getDatasets().size(), 1u);
  EXPECT_EQ(datasets.getDatasets()[0].getNumSplits(), 12u);
  EXPECT_TRUE(datasets.getDatasets()[0].getHasElementSpec());

  auto jobs = *client.ListJobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].name, "n");
  EXPECT_EQ(jobs[0].processing_mode, ProcessingMode::DYNAMIC);
  EXPECT_EQ(jobs[0].num_clients, 1u);
  EXPECT_EQ(jobs[0].num_tasks, 2u);
  EXPECT_EQ(jobs[1].num_tasks, 2u) << "an active and a pending task";

  auto request = client.dispatcher().getJobRequest();
  request.setJobId(rr.job_id);
  auto one = loop.Wait(request.send());
  EXPECT_EQ(one.getJob().getNumConsumers(), 2u);
  ASSERT_EQ(one.getTasks().size(), 2u);
  EXPECT_FALSE(one.getTasks()[0].getPending());
  EXPECT_TRUE(one.getTasks()[1].getPending());
  ASSERT_EQ(one.getClients().size(), 1u);
  EXPECT_EQ(one.getClients()[0].getJobClientId(), rr.job_client_id);
  EXPECT_GT(one.getClients()[0].getLastHeartbeatMicros(), 0);

  auto unknown = client.dispatcher().getJobRequest();
  unknown.setJobId(999);
  auto missing = Try(loop, unknown.send().then([](auto) { return true; }));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("job 999"), std::string::npos);

  EXPECT_EQ(client.ListTasks()->size(), 4u);
  EXPECT_EQ(*client.ListJobClients(), (std::vector<uint64_t>{job.job_client_id, rr.job_client_id}));
}

TEST(Listings, EveryDataServiceReplyCarriesTheIncarnation) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  const uint64_t incarnation = client.Incarnation();
  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_EQ(worker.last_incarnation(), incarnation);
  auto& d = client.dispatcher();
  auto ws = loop.Wait([&] {
    auto r = d.getOrRegisterDatasetRequest();
    r.setDefinition(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>("x"), 1));
    r.initSplitSource().setIndexed(3);
    return r.send();
  }());
  EXPECT_EQ(ws.getIncarnation(), incarnation);
  uint64_t dataset = ws.getDatasetId();
  auto job = *client.GetOrCreateJob({.dataset_id = dataset, .mode = ProcessingMode::DYNAMIC});
  EXPECT_EQ(job.incarnation, incarnation);
  EXPECT_EQ(client.GetDatasetDef(dataset)->incarnation, incarnation);
  EXPECT_EQ(client.ClientHeartbeat(job.job_client_id)->incarnation, incarnation);
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_EQ(client.GetSplit(worker.TaskOf(job.job_id)->task_id, 0, 1)->incarnation, incarnation);
  EXPECT_EQ(loop.Wait(d.getWorkersRequest().send()).getIncarnation(), incarnation);
  EXPECT_EQ(loop.Wait(d.listDatasetsRequest().send()).getIncarnation(), incarnation);
  EXPECT_EQ(loop.Wait(d.listJobsRequest().send()).getIncarnation(), incarnation);
  EXPECT_EQ(loop.Wait(d.listTasksRequest().send()).getIncarnation(), incarnation);
  EXPECT_EQ(loop.Wait(d.listJobClientsRequest().send()).getIncarnation(), incarnation);
  auto update = d.workerUpdateRequest();
  update.setWorkerId(worker.worker_id());
  EXPECT_EQ(loop.Wait(update.send()).getIncarnation(), incarnation);
  auto remove = d.maybeRemoveTaskRequest();
  remove.setTaskId(12345);
  EXPECT_EQ(loop.Wait(remove.send()).getIncarnation(), incarnation);
  auto release = d.releaseJobClientRequest();
  release.setJobClientId(job.job_client_id);
  EXPECT_EQ(loop.Wait(release.send()).getIncarnation(), incarnation);
}

TEST(Flags, HelpDocumentsEveryDataServiceSettingAndBadValuesAreRefused) {
  Subprocess help({DispatcherBinary(), "--help"});
  std::string text;
  while (auto line = help.ReadLine(std::chrono::seconds(10))) text += *line + "\n";
  for (const char* flag :
       {"--fault-tolerant-mode", "--worker-addresses", "--job-gc-check-interval-ms",
        "--job-gc-timeout-ms", "--client-timeout-ms", "--worker-timeout-ms",
        "--worker-heartbeat-interval-ms", "--snapshot-every", "--max-splits-per-call",
        "--max-name-bytes", "--listen", "--work-dir"}) {
    EXPECT_NE(text.find(flag), std::string::npos) << flag << " is missing from --help";
  }
  EXPECT_NE(text.find("durability"), std::string::npos)
      << "--help says why fault-tolerant mode defaults to true";
  for (const char* bad :
       {"--fault-tolerant-mode=maybe", "--worker-addresses=a,,b", "--worker-timeout-ms=-1"}) {
    Subprocess refused({DispatcherBinary(), bad, "--listen=tcp:127.0.0.1:0"});
    auto status = refused.Wait(std::chrono::seconds(10));
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << bad;
  }
}

}  // namespace
}  // namespace dispatch::testing
