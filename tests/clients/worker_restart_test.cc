// Workers across dispatcher restarts: killed -9 or stopped gracefully and
// started again on the same work dir and address, the WorkerAgent and the
// dispatch-worker binary reconnect with backoff, notice the new incarnation
// and re-register as the same worker; held tasks are not started twice, and
// a DYNAMIC epoch interrupted by kill -9 hands out every split exactly once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include "clients/dataset_client.h"
#include "clients/job_client.h"
#include "tests/clients/client_test_support.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using clients::WorkerAgentStatus;

void ExpectSameWorkerAfterRestart(bool kill9) {
  RestartableDispatcher dispatcher;
  TestAgent a(dispatcher.address(), "agent-a", TestSeed());
  ASSERT_TRUE(a.agent->Start().ok());
  ASSERT_TRUE(
      a.agent->WaitFor([](const WorkerAgentStatus& s) { return s.registered; }, kTestDeadline));
  WorkerAgentStatus before = a.agent->status();
  {
    // A held (OFF) task, to see it is not started a second time.
    ClientLoop loop;
    auto conn = loop.Connect(dispatcher.address());
    auto dataset = loop.Wait(clients::RegisterDataset(conn->dispatcher(), DatasetOf("held")));
    auto job = loop.Wait(clients::JobClient::Create(conn->dispatcher(), loop.io().timer(),
                                                    JobOf(dataset.dataset_id)));
    ASSERT_TRUE(a.records->WaitFor([](const auto& r) { return r.started.size() == 1; }));
  }
  if (kill9) {
    dispatcher.Kill9();
  } else {
    dispatcher.StopGracefully();
  }
  ASSERT_TRUE(
      a.agent->WaitFor([](const WorkerAgentStatus& s) { return !s.connected; }, kTestDeadline));
  dispatcher.Start();
  ASSERT_TRUE(a.agent->WaitFor(
      [&](const WorkerAgentStatus& s) {
        return s.registered && s.dispatcher_incarnation != before.dispatcher_incarnation;
      },
      kTestDeadline))
      << a.agent->status().last_error;
  WorkerAgentStatus after = a.agent->status();
  EXPECT_EQ(after.worker_id, before.worker_id) << "same address, same worker";
  EXPECT_GE(after.dispatcher_restarts, 1u);
  EXPECT_GE(after.registrations, 2u);
  EXPECT_EQ(after.worker_incarnation, before.worker_incarnation);
  EXPECT_EQ(a.records->Snapshot().started.size(), 1u) << "a held task was started twice";
}

TEST(WorkerAgentRestart, ReregistersAsTheSameWorkerAfterKill9) {
  ExpectSameWorkerAfterRestart(true);
}

TEST(WorkerAgentRestart, ReregistersAsTheSameWorkerAfterAGracefulRestart) {
  ExpectSameWorkerAfterRestart(false);
}

TEST(WorkerAgentRestart, EverySplitOnceAcrossAKill9MidEpoch) {
  constexpr uint64_t kSplits = 3000;
  RestartableDispatcher dispatcher;
  TestAgent a(dispatcher.address(), "agent-a", TestSeed());
  TestAgent b(dispatcher.address(), "agent-b", TestSeed() + 1);
  for (auto* t : {&a, &b}) {
    ASSERT_TRUE(t->agent->Start().ok());
    ASSERT_TRUE(
        t->agent->WaitFor([](const WorkerAgentStatus& s) { return s.registered; }, kTestDeadline));
  }
  {
    ClientLoop loop;
    auto conn = loop.Connect(dispatcher.address());
    auto dataset =
        loop.Wait(clients::RegisterDataset(conn->dispatcher(), DatasetOf("range-3000", kSplits)));
    auto job = loop.Wait(
        clients::JobClient::Create(conn->dispatcher(), loop.io().timer(),
                                   JobOf(dataset.dataset_id, rpc::ProcessingMode::DYNAMIC)));
  }
  ASSERT_TRUE(a.records->WaitFor([](const auto& r) { return r.splits.size() >= 200; }));
  dispatcher.Kill9();
  dispatcher.Start();
  auto done = [](const RecordingFactory::Record& r) { return r.completed.size() == 1; };
  ASSERT_TRUE(a.records->WaitFor(done)) << a.agent->status().last_error;
  ASSERT_TRUE(b.records->WaitFor(done)) << b.agent->status().last_error;
  std::multiset<uint64_t> all;
  for (auto* t : {&a, &b}) {
    auto record = t->records->Snapshot();
    all.insert(record.splits.begin(), record.splits.end());
  }
  ASSERT_EQ(all.size(), kSplits);
  uint64_t expected = 0;
  for (uint64_t index : all) ASSERT_EQ(index, expected++) << "a split was handed out twice or lost";
}

TEST(DispatchWorker, ReregistersAsTheSameWorkerAfterKill9) {
  RestartableDispatcher dispatcher;
  WorkerProcess worker(dispatcher.address());
  uint64_t id = worker.WaitRegistered();
  ASSERT_NE(id, 0u);
  dispatcher.Kill9();
  dispatcher.Start();
  EXPECT_EQ(worker.WaitRegistered(), id);
  // And it stops cleanly on SIGTERM.
  worker.process().Signal(SIGTERM);
  auto status = worker.process().Wait(kTestDeadline);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

TEST(DispatchWorker, PrintsHelpAndRefusesBadFlags) {
  {
    Subprocess help({DispatchWorkerBinary(), "--help"});
    std::string text;
    while (auto line = help.ReadLine(kTestDeadline)) text += *line + "\n";
    auto status = help.Wait(kTestDeadline);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(WEXITSTATUS(*status), 0);
    for (const char* flag : {"--dispatcher", "--address", "--transfer-address", "--tags",
                             "--heartbeat-ms", "--token"}) {
      EXPECT_NE(text.find(flag), std::string::npos) << flag << " missing from --help";
    }
  }
  for (std::vector<std::string> argv :
       {std::vector<std::string>{DispatchWorkerBinary(), "--no-such-flag"},
        std::vector<std::string>{DispatchWorkerBinary(), "--dispatcher=tcp:127.0.0.1:1"},
        std::vector<std::string>{DispatchWorkerBinary(), "--dispatcher=bad", "--address=x"},
        std::vector<std::string>{DispatchWorkerBinary(), "--dispatcher=tcp:127.0.0.1:1",
                                 "--address=x", "--heartbeat-ms=0"},
        // A free port only for the address it listens on, not for an identity alone.
        std::vector<std::string>{DispatchWorkerBinary(), "--dispatcher=tcp:127.0.0.1:1",
                                 "--address=tcp:127.0.0.1:0", "--transfer-address=unix:/t"}}) {
    Subprocess bad(argv);
    auto status = bad.Wait(kTestDeadline);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status));
    EXPECT_EQ(WEXITSTATUS(*status), 2) << argv.back();
  }
}

}  // namespace
}  // namespace dispatch::testing
