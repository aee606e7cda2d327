// The consumer JobClient against the real dispatcher and dispatch-worker
// processes: named jobs are joined (a new job client each time), a named job
// reused with another mode is refused, anonymous jobs are always new, the
// task list follows workers joining and leaving and is re-read only when it
// changed, and Close() releases the job client.
#include "clients/job_client.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <set>

#include "clients/dataset_client.h"
#include "common/rpc_status.h"
#include "tests/clients/client_test_support.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"

namespace dispatch::testing {
namespace {

using clients::JobClient;
using clients::JobOptions;

class JobClientTest : public ::testing::Test {
 protected:
  JobClientTest() : env_(std::make_unique<Env>()) {}

  uint64_t Dataset(const std::string& definition) {
    return loop_.Wait(clients::RegisterDataset(conn_->dispatcher(), DatasetOf(definition)))
        .dataset_id;
  }
  kj::Own<JobClient> Job(JobOptions options) {
    options.heartbeat_interval_ms = 50;
    return loop_.Wait(JobClient::Create(conn_->dispatcher(), loop_.io().timer(), options));
  }
  // The dispatcher's own view of the job's task ids.
  std::set<uint64_t> DispatcherTasks(uint64_t job_id) {
    auto request = conn_->dispatcher().getJobRequest();
    request.setJobId(job_id);
    auto reply = loop_.Wait(request.send());
    std::set<uint64_t> ids;
    for (auto t : reply.getTasks()) ids.insert(t.getTaskId());
    return ids;
  }
  static std::set<uint64_t> Ids(const JobClient& client) {
    std::set<uint64_t> ids;
    for (auto& t : client.tasks()) ids.insert(t.task_id);
    return ids;
  }
  static std::set<std::string> Workers(const JobClient& client) {
    std::set<std::string> addresses;
    for (auto& t : client.tasks()) addresses.insert(t.worker_address);
    return addresses;
  }

  // Held through a unique_ptr: KJ objects have throwing destructors, which a
  // gtest fixture's own destructor may not have.
  struct Env {
    Env() : conn(loop.Connect(dispatcher.address())) {}
    DispatcherProcess dispatcher;
    ClientLoop loop;
    kj::Own<clients::DispatcherConnection> conn;
  };
  std::unique_ptr<Env> env_;
  DispatcherProcess& dispatcher_ = env_->dispatcher;
  ClientLoop& loop_ = env_->loop;
  kj::Own<clients::DispatcherConnection>& conn_ = env_->conn;
};

TEST_F(JobClientTest, JoiningANamedJobGivesTheSameJobAndANewJobClient) {
  uint64_t dataset = Dataset("named");
  auto first = Job(JobOf(dataset, rpc::ProcessingMode::OFF, "train"));
  auto second = Job(JobOf(dataset, rpc::ProcessingMode::OFF, "train"));
  EXPECT_EQ(first->job_id(), second->job_id());
  EXPECT_NE(first->job_client_id(), second->job_client_id());
  auto other_index = Job(JobOf(dataset, rpc::ProcessingMode::OFF, "train", 1));
  EXPECT_NE(other_index->job_id(), first->job_id());
  auto anonymous_a = Job(JobOf(dataset));
  auto anonymous_b = Job(JobOf(dataset));
  EXPECT_NE(anonymous_a->job_id(), anonymous_b->job_id());
}

TEST_F(JobClientTest, ANamedJobReusedWithAnotherModeIsRefused) {
  uint64_t dataset = Dataset("modes");
  auto first = Job(JobOf(dataset, rpc::ProcessingMode::OFF, "eval"));
  JobOptions options = JobOf(dataset, rpc::ProcessingMode::DYNAMIC, "eval");
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { Job(options); })) {
    Status status = StatusFromException(*e);
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  } else {
    ADD_FAILURE() << "reusing job 'eval' with another processing mode succeeded";
  }
}

TEST_F(JobClientTest, FollowsTheTaskListAsWorkersJoinAndLeave) {
  WorkerProcess w1(dispatcher_.address(), {"--hold-tasks"});
  ASSERT_NE(w1.WaitRegistered(), 0u);
  uint64_t dataset = Dataset("follow");
  auto client = Job(JobOf(dataset, rpc::ProcessingMode::OFF, "follow"));
  ASSERT_TRUE(WaitUntil([&] { return Workers(*client).count(w1.address()) == 1; }, loop_));

  WorkerProcess w2(dispatcher_.address(), {"--hold-tasks"});
  ASSERT_NE(w2.WaitRegistered(), 0u);
  ASSERT_TRUE(WaitUntil([&] { return Workers(*client).count(w2.address()) == 1; }, loop_))
      << "the new worker's task never reached the consumer";
  EXPECT_EQ(Ids(*client), DispatcherTasks(client->job_id()));

  // Unchanged list: heartbeats go on, the list is not sent again.
  uint64_t reads = client->task_list_reads();
  uint64_t beats = client->heartbeats();
  for (int i = 0; i < 5; ++i) loop_.Wait(client->HeartbeatNow());
  EXPECT_GE(client->heartbeats(), beats + 5);
  EXPECT_EQ(client->task_list_reads(), reads) << "an unchanged task list was re-read";

  // A worker leaves (killed): the consumer ends up with the dispatcher's view.
  w2.process().Signal(SIGKILL);
  ASSERT_TRUE(w2.process().Wait(kTestDeadline).has_value());
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto reply = loop_.Wait(conn_->dispatcher().getWorkersRequest().send());
        for (auto w : reply.getWorkers()) {
          if (w.getAddress() == w2.address() && w.getConnected()) return false;
        }
        return true;
      },
      loop_))
      << "the dispatcher never noticed the killed worker";
  EXPECT_TRUE(WaitUntil([&] { return Ids(*client) == DispatcherTasks(client->job_id()); }, loop_));
  EXPECT_TRUE(client->status().ok()) << client->status().ToString();
}

TEST_F(JobClientTest, CloseReleasesTheJobClient) {
  uint64_t dataset = Dataset("release");
  auto client = Job(JobOf(dataset, rpc::ProcessingMode::OFF, "release"));
  uint64_t id = client->job_client_id();
  auto listed = [&] {
    auto reply = loop_.Wait(conn_->dispatcher().listJobClientsRequest().send());
    for (auto c : reply.getClients()) {
      if (c.getJobClientId() == id) return true;
    }
    return false;
  };
  EXPECT_TRUE(listed());
  loop_.Wait(client->Close());
  loop_.Wait(client->Close());  // idempotent
  EXPECT_FALSE(listed()) << "job client " << id << " still listed after Close()";
  EXPECT_ANY_THROW(loop_.Wait(client->HeartbeatNow()));
}

}  // namespace
}  // namespace dispatch::testing

namespace dispatch::testing {
namespace {

// Through a ReconnectingConnection, a consumer's job client outlives a
// dispatcher killed -9: the same job client id heartbeats again, the task
// list is read again in full, and it matches the dispatcher's.
TEST(JobClientRestart, KeepsItsJobClientAcrossADispatcherKill9) {
  RestartableDispatcher dispatcher;
  WorkerProcess worker(dispatcher.address(), {"--hold-tasks"});
  ASSERT_NE(worker.WaitRegistered(), 0u);
  ClientLoop loop;
  clients::ReconnectingConnection connection(loop.io().network(), loop.io().timer(),
                                             dispatcher.address(), "", TestSeed(), 20, 200);
  loop.Wait(connection.Ready());
  uint64_t dataset =
      loop.Wait(clients::RegisterDataset(connection.dispatcher(), DatasetOf("rc"))).dataset_id;
  auto client = loop.Wait(clients::JobClient::Create(
      connection, loop.io().timer(), JobOf(dataset, rpc::ProcessingMode::OFF, "survivor")));
  ASSERT_TRUE(WaitUntil([&] { return client->tasks().size() == 1; }, loop));
  uint64_t incarnation = client->dispatcher_incarnation();
  uint64_t reads = client->task_list_reads();

  dispatcher.Kill9();
  dispatcher.Start();
  ASSERT_TRUE(WaitUntil(
      [&] {
        return client->dispatcher_incarnation() != incarnation && client->task_list_reads() > reads;
      },
      loop))
      << client->status().ToString();
  EXPECT_TRUE(client->status().ok()) << client->status().ToString();
  EXPECT_GE(connection.generation(), 2u);

  auto request = connection.dispatcher().getJobRequest();
  request.setJobId(client->job_id());
  auto reply = loop.Wait(request.send());
  std::set<uint64_t> truth;
  for (auto t : reply.getTasks()) truth.insert(t.getTaskId());
  std::set<uint64_t> seen;
  for (auto& t : client->tasks()) seen.insert(t.task_id);
  EXPECT_EQ(seen, truth);
  bool listed = false;
  for (auto c : reply.getClients()) listed |= c.getJobClientId() == client->job_client_id();
  EXPECT_TRUE(listed) << "job client " << client->job_client_id() << " lost in the restart";
  loop.Wait(client->Close());
}

}  // namespace
}  // namespace dispatch::testing
