// Routing by registered functions, against the real dispatcher: a closure
// goes only to a worker that registered its function (and its per-worker
// resources' functions); one no connected worker can run waits, counted in
// the stats, without failing or cancelling anything, and runs as soon as a
// worker that can run it joins. Workers are dispatch-worker processes (the
// built-in functions) and embedded WorkerAgents with functions of their own.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

#include "tests/closures/closure_test_support.h"
#include "tests/integration/client_loop.h"

namespace dispatch::testing {
namespace {

using clients::ClosureCall;
using clients::ClosureOutput;
using clients::RemoteValueStatus;
using clients::WorkerAgentStatus;

// An agent running `functions`, each answering its worker's name.
std::unique_ptr<clients::WorkerAgent> StartAgent(const std::string& dispatcher,
                                                 const std::string& name,
                                                 const std::vector<std::string>& functions) {
  auto agent = MakeAgent(dispatcher, name, 2);
  for (const std::string& function : functions) {
    Status registered = agent->RegisterFunction(function, [](const ClosureCall& call) {
      return ClosureOutput::Result(call.worker_address());
    });
    if (!registered.ok()) throw std::runtime_error(registered.ToString());
  }
  if (!agent->Start().ok() ||
      !agent->WaitFor([](const WorkerAgentStatus& s) { return s.registered; }, kTestDeadline)) {
    throw std::runtime_error("agent " + name + " did not register");
  }
  return agent;
}

struct WithoutWorker {
  uint64_t closure_stats = 0;
  uint64_t server_stats = 0;
};

WithoutWorker Unrunnable(const std::string& dispatcher) {
  ClientLoop loop;
  auto connection = loop.Connect(dispatcher);
  WithoutWorker out;
  out.closure_stats = loop.Wait(connection->dispatcher().getClosureStatsRequest().send())
                          .getStats()
                          .getQueuedWithoutWorker();
  out.server_stats = loop.Wait(connection->dispatcher().getServerStatsRequest().send())
                         .getStats()
                         .getClosuresWithoutWorker();
  return out;
}

TEST(ClosureRouting, AClosureOfAFunctionNoWorkerRegisteredWaitsUntilOneThatHasItJoins) {
  ClosureDispatcher dispatcher;
  auto builtins = StartClosureWorker(dispatcher.address(), 1);
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto train = coordinator->Schedule("train", "epoch 1");
  ASSERT_TRUE(train.ok());
  std::vector<clients::RemoteValue> echoes;
  for (int i = 0; i < 5; ++i) echoes.push_back(*coordinator->Schedule("echo", std::to_string(i)));
  // The closures the worker can run run; the other is no error and cancels nothing.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(FetchOrDie(echoes[i]), std::to_string(i));
  EXPECT_TRUE(WaitUntil([&] { return Unrunnable(dispatcher.address()).closure_stats == 1; }));
  EXPECT_EQ(Unrunnable(dispatcher.address()).server_stats, 1u);
  EXPECT_EQ(train->status(), RemoteValueStatus::kPending);
  ClosureCounters counters = GetClosureCounters(dispatcher.address());
  EXPECT_EQ(counters.queued, 1u);
  EXPECT_EQ(counters.failed, 0u);
  EXPECT_EQ(counters.cancelled, 0u);
  auto done = coordinator->Done();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_FALSE(*done);

  auto trainer = StartAgent(dispatcher.address(), "agent-trainer", {"train"});
  EXPECT_EQ(FetchOrDie(*train), "agent-trainer");
  EXPECT_EQ(Unrunnable(dispatcher.address()).closure_stats, 0u);
  EXPECT_TRUE(coordinator->Join().ok());
  trainer->Stop();
}

// Before routing, half of these landed on a worker without their function,
// failed as user errors and cancelled the rest of the coordinator's queue.
TEST(ClosureRouting, ClosuresGoOnlyToWorkersThatRegisteredTheirFunction) {
  ClosureDispatcher dispatcher;
  auto a = StartAgent(dispatcher.address(), "agent-a", {"only_a", "both"});
  auto b = StartAgent(dispatcher.address(), "agent-b", {"only_b", "both"});
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<std::pair<std::string, clients::RemoteValue>> values;
  for (int i = 0; i < 30; ++i) {
    const char* function = i % 3 == 0 ? "only_a" : i % 3 == 1 ? "only_b" : "both";
    values.emplace_back(function, *coordinator->Schedule(function, ""));
  }
  std::set<std::string> ran_both;
  for (auto& [function, value] : values) {
    const std::string worker = FetchOrDie(value);
    if (function == "both") {
      ran_both.insert(worker);
    } else {
      EXPECT_EQ(worker, function == "only_a" ? "agent-a" : "agent-b");
    }
  }
  EXPECT_EQ(ran_both.size(), 2u) << "closures both can run are spread over both";
  EXPECT_TRUE(coordinator->Join().ok());
  a->Stop();
  b->Stop();
}

TEST(ClosureRouting, AClosureGoesOnlyToAWorkerThatCanBuildItsResources) {
  ClosureDispatcher dispatcher;
  auto user_only = StartAgent(dispatcher.address(), "agent-user-only", {"use"});
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto resource = coordinator->CreatePerWorkerResource("load_model", "weights");
  ASSERT_TRUE(resource.ok()) << resource.status().ToString();
  auto with_model = coordinator->Schedule("use", "", {*resource});
  auto without = coordinator->Schedule("use", "");
  ASSERT_TRUE(with_model.ok() && without.ok());
  EXPECT_EQ(FetchOrDie(*without), "agent-user-only");
  EXPECT_TRUE(WaitUntil([&] { return Unrunnable(dispatcher.address()).closure_stats == 1; }));
  EXPECT_EQ(with_model->status(), RemoteValueStatus::kPending);

  auto builder = StartAgent(dispatcher.address(), "agent-builder", {"use", "load_model"});
  EXPECT_EQ(FetchOrDie(*with_model), "agent-builder");
  EXPECT_TRUE(coordinator->Join().ok());
  user_only->Stop();
  builder->Stop();
}

}  // namespace
}  // namespace dispatch::testing
