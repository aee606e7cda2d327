// WorkerAgent embedded in the test process, against the real dispatcher:
// registration, pushed tasks (started once), dynamic splits (each once across
// two workers, sequences 1, 2, 3...), completion reports, and an embedding
// thread that is never blocked while the dispatcher is unreachable or stuck.
#include <gtest/gtest.h>
#include <signal.h>

#include <future>

#include "clients/dataset_client.h"
#include "clients/job_client.h"
#include "tests/clients/client_test_support.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"

namespace dispatch::testing {
namespace {

using clients::WorkerAgentStatus;

bool Registered(const WorkerAgentStatus& s) { return s.registered; }

// Starts the agent and waits for its registration.
void StartAndRegister(TestAgent& a) {
  ASSERT_TRUE(a.agent->Start().ok());
  ASSERT_TRUE(a.agent->WaitFor(Registered, kTestDeadline)) << a.agent->status().last_error;
}

uint64_t RegisterDataset(ClientLoop& loop, clients::DispatcherConnection& conn,
                         clients::DatasetSpec spec) {
  return loop.Wait(clients::RegisterDataset(conn.dispatcher(), spec)).dataset_id;
}

kj::Own<clients::JobClient> MakeJob(ClientLoop& loop, clients::DispatcherConnection& conn,
                                    clients::JobOptions options) {
  options.heartbeat_interval_ms = 100;
  return loop.Wait(clients::JobClient::Create(conn.dispatcher(), loop.io().timer(), options));
}

TEST(WorkerAgent, RegistersAndAppearsInGetWorkers) {
  DispatcherProcess dispatcher;
  TestAgent a(dispatcher.address(), "agent-a", TestSeed());
  StartAndRegister(a);
  WorkerAgentStatus status = a.agent->status();
  EXPECT_NE(status.worker_id, 0u);
  EXPECT_NE(status.dispatcher_incarnation, 0u);
  EXPECT_EQ(status.registrations, 1u);

  ClientLoop loop;
  auto conn = loop.Connect(dispatcher.address());
  bool found = WaitUntil(
      [&] {
        auto reply = loop.Wait(conn->dispatcher().getWorkersRequest().send());
        for (auto w : reply.getWorkers()) {
          if (w.getAddress() == "agent-a") return w.getWorkerId() == status.worker_id;
        }
        return false;
      },
      loop);
  EXPECT_TRUE(found) << "agent-a missing from getWorkers";
}

TEST(WorkerAgent, RunsPushedTasksOnce) {
  DispatcherProcess dispatcher;
  // Heartbeats an hour apart: a task that starts within the deadline was pushed
  // (unless the dispatcher asks for a shorter interval, which it may).
  TestAgent a(dispatcher.address(), "agent-a", TestSeed(), 3600 * 1000);
  StartAndRegister(a);

  ClientLoop loop;
  auto conn = loop.Connect(dispatcher.address());
  uint64_t dataset = RegisterDataset(loop, *conn, DatasetOf("pushed"));
  auto job = MakeJob(loop, *conn, JobOf(dataset));
  ASSERT_TRUE(a.records->WaitFor([](const auto& r) { return r.started.size() == 1; }));
  EXPECT_TRUE(a.agent->WaitFor([](const WorkerAgentStatus& s) { return s.pushes_received >= 1; },
                               kTestDeadline));

  // More heartbeats, and a second job: the first task is not started again.
  uint64_t before = a.agent->status().heartbeats;
  for (int i = 0; i < 3; ++i) {
    a.agent->HeartbeatNow();
    ASSERT_TRUE(a.agent->WaitFor(
        [&](const WorkerAgentStatus& s) { return s.heartbeats >= before + i + 1; }, kTestDeadline));
  }
  auto second = MakeJob(loop, *conn, JobOf(dataset));
  ASSERT_TRUE(a.records->WaitFor([](const auto& r) { return r.started.size() == 2; }));
  // The handler is created (and recorded) before the agent counts the task in
  // its status: wait for the status too rather than read it mid-update.
  EXPECT_TRUE(a.agent->WaitFor(
      [](const WorkerAgentStatus& s) { return s.tasks_started >= 2 && s.tasks.size() >= 2; },
      kTestDeadline));
  EXPECT_EQ(a.agent->status().tasks_started, 2u);
  EXPECT_EQ(a.agent->status().tasks.size(), 2u);
}

TEST(WorkerAgent, TwoWorkersFetchEverySplitOnceAndReportCompletion) {
  constexpr uint64_t kSplits = 500;
  DispatcherProcess dispatcher;
  TestAgent a(dispatcher.address(), "agent-a", TestSeed());
  TestAgent b(dispatcher.address(), "agent-b", TestSeed() + 1);
  StartAndRegister(a);
  StartAndRegister(b);

  ClientLoop loop;
  auto conn = loop.Connect(dispatcher.address());
  uint64_t dataset = RegisterDataset(loop, *conn, DatasetOf("range", kSplits));
  auto job = MakeJob(loop, *conn, JobOf(dataset, rpc::ProcessingMode::DYNAMIC));
  auto done = [](const RecordingFactory::Record& r) { return r.completed.size() == 1; };
  ASSERT_TRUE(a.records->WaitFor(done));
  ASSERT_TRUE(b.records->WaitFor(done));

  std::multiset<uint64_t> all;
  for (auto* agent : {&a, &b}) {
    auto record = agent->records->Snapshot();
    all.insert(record.splits.begin(), record.splits.end());
    for (size_t i = 0; i < record.sequences.size(); ++i) EXPECT_EQ(record.sequences[i], i + 1);
  }
  ASSERT_EQ(all.size(), kSplits);
  uint64_t expected = 0;
  for (uint64_t index : all)
    EXPECT_EQ(index, expected++) << "a split was handed out twice or skipped";

  for (auto* agent : {&a, &b}) {
    EXPECT_TRUE(agent->agent->WaitFor(
        [](const WorkerAgentStatus& s) { return s.completions_reported >= 1; }, kTestDeadline));
  }
  EXPECT_TRUE(WaitUntil([&] { return job->job_finished(); }, loop)) << "job never finished";
}

// Runs `call` on another thread and reports whether it returned in time
// (a deadline against hangs, not a timing assertion).
bool Returns(std::function<void()> call) {
  auto done = std::async(std::launch::async, std::move(call));
  return done.wait_for(kTestDeadline) == std::future_status::ready;
}

TEST(WorkerAgent, NeverBlocksTheEmbeddingThreadWhileTheDispatcherIsUnreachable) {
  // A Unix socket, removed when the dispatcher stops: a freed TCP port could
  // meanwhile be another process's, which would answer.
  TempDir dir;
  const std::string address = "unix:" + dir.File("gone.sock");
  {
    DispatcherProcess gone({.listen = address});
    ASSERT_TRUE(gone.Terminate().has_value());
  }
  TestAgent a(address, "agent-a", TestSeed());
  ASSERT_TRUE(Returns([&] { ASSERT_TRUE(a.agent->Start().ok()); }));
  ASSERT_TRUE(a.agent->WaitFor([](const WorkerAgentStatus& s) { return s.connect_failures >= 3; },
                               kTestDeadline));
  std::promise<void> ran;
  EXPECT_TRUE(Returns([&] {
    a.agent->HeartbeatNow();
    EXPECT_FALSE(a.agent->status().registered);
    EXPECT_TRUE(a.agent->Post([&] { ran.set_value(); }));
  }));
  EXPECT_EQ(ran.get_future().wait_for(kTestDeadline), std::future_status::ready);
  EXPECT_TRUE(Returns([&] { a.agent->Stop(); }));
  EXPECT_FALSE(a.agent->status().running);
  EXPECT_FALSE(a.agent->Post([] {}));
}

TEST(WorkerAgent, NeverBlocksTheEmbeddingThreadWhileTheDispatcherIsStuck) {
  DispatcherProcess dispatcher;
  TestAgent a(dispatcher.address(), "agent-a", TestSeed());
  StartAndRegister(a);
  // Connected, but nobody answers: heartbeats and calls hang on the wire.
  dispatcher.process().Signal(SIGSTOP);
  std::promise<void> ran;
  EXPECT_TRUE(Returns([&] {
    a.agent->HeartbeatNow();
    a.agent->HeartbeatNow();
    (void)a.agent->status();
    EXPECT_TRUE(a.agent->Post([&] { ran.set_value(); }));
  }));
  EXPECT_EQ(ran.get_future().wait_for(kTestDeadline), std::future_status::ready);
  EXPECT_TRUE(Returns([&] { a.agent->Stop(); }));
  dispatcher.process().Signal(SIGCONT);
}

TEST(WorkerAgent, RejectsBadOptionsAndASecondStart) {
  clients::WorkerAgentOptions options;
  options.dispatcher_address = "nonsense";
  options.worker_address = "agent-a";
  clients::WorkerAgent bad(options, std::make_unique<RecordingFactory>());
  EXPECT_EQ(bad.Start().code(), StatusCode::kInvalidArgument);

  options.dispatcher_address = "tcp:127.0.0.1:1";
  clients::WorkerAgent agent(options, std::make_unique<RecordingFactory>());
  ASSERT_TRUE(agent.Start().ok());
  EXPECT_EQ(agent.Start().code(), StatusCode::kFailedPrecondition);
  agent.Stop();
  agent.Stop();  // idempotent
}

}  // namespace
}  // namespace dispatch::testing

namespace dispatch::testing {
namespace {

// An AgentService runs on the agent thread, sees the tasks the agent runs,
// and is cancelled when the agent stops.
class ProbeService final : public clients::AgentService {
 public:
  struct Seen {
    std::mutex mu;
    std::condition_variable changed;
    bool ran = false;
    bool found_task = false;
    bool cancelled = false;
  };
  explicit ProbeService(std::shared_ptr<Seen> seen) : seen_(std::move(seen)) {}

  kj::Promise<void> Run(clients::AgentEnvironment& env) override {
    Update([](Seen& s) { s.ran = true; });
    return Poll(env).attach(kj::defer([seen = seen_]() {
      {
        std::lock_guard<std::mutex> lock(seen->mu);
        seen->cancelled = true;
      }
      seen->changed.notify_all();
    }));
  }

 private:
  // Looks for a task every few loop milliseconds (the agent's loop, not a sleep).
  kj::Promise<void> Poll(clients::AgentEnvironment& env) {
    return env.timer().afterDelay(5 * kj::MILLISECONDS).then([this, &env]() -> kj::Promise<void> {
      for (uint64_t id = 1; id < 64; ++id) {
        if (env.FindTask(id) != nullptr) {
          Update([](Seen& s) { s.found_task = true; });
          return kj::NEVER_DONE;
        }
      }
      return Poll(env);
    });
  }
  void Update(const std::function<void(Seen&)>& change) {
    {
      std::lock_guard<std::mutex> lock(seen_->mu);
      change(*seen_);
    }
    seen_->changed.notify_all();
  }
  std::shared_ptr<Seen> seen_;
};

TEST(WorkerAgent, RunsAddedServicesOnItsLoopUntilStopped) {
  DispatcherProcess dispatcher;
  TestAgent a(dispatcher.address(), "agent-a", TestSeed());
  auto seen = std::make_shared<ProbeService::Seen>();
  a.agent->AddService(std::make_unique<ProbeService>(seen));
  ASSERT_TRUE(a.agent->Start().ok());
  ASSERT_TRUE(
      a.agent->WaitFor([](const WorkerAgentStatus& s) { return s.registered; }, kTestDeadline));
  ClientLoop loop;
  auto conn = loop.Connect(dispatcher.address());
  uint64_t dataset =
      loop.Wait(clients::RegisterDataset(conn->dispatcher(), DatasetOf("svc"))).dataset_id;
  auto job =
      loop.Wait(clients::JobClient::Create(conn->dispatcher(), loop.io().timer(), JobOf(dataset)));
  {
    std::unique_lock<std::mutex> lock(seen->mu);
    EXPECT_TRUE(
        seen->changed.wait_for(lock, kTestDeadline, [&] { return seen->ran && seen->found_task; }));
  }
  a.agent->Stop();
  std::lock_guard<std::mutex> lock(seen->mu);
  EXPECT_TRUE(seen->cancelled);
}

}  // namespace
}  // namespace dispatch::testing
