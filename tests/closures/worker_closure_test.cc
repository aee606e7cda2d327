// The closure runner inside an embedded WorkerAgent, against the real
// dispatcher: a function that blocks never stops the heartbeats, a throwing
// function fails its closure instead of the worker, and registration rules.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>

#include "tests/closures/closure_test_support.h"

namespace dispatch::testing {
namespace {

using clients::ClosureCall;
using clients::ClosureOutput;
using clients::WorkerAgentStatus;

TEST(WorkerClosures, ABlockingFunctionNeverStopsTheHeartbeats) {
  ClosureDispatcher dispatcher;
  auto agent = MakeAgent(dispatcher.address(), "agent-a", 1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  ASSERT_TRUE(agent
                  ->RegisterFunction("block",
                                     [released](const ClosureCall& call) {
                                       released.wait();
                                       return ClosureOutput::Result(std::string(call.args()));
                                     })
                  .ok());
  ASSERT_TRUE(agent->Start().ok());
  ASSERT_TRUE(
      agent->WaitFor([](const WorkerAgentStatus& s) { return s.registered; }, kTestDeadline));
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto value = coordinator->Schedule("block", "unblocked");
  ASSERT_TRUE(value.ok());
  ASSERT_TRUE(agent->WaitFor([](const WorkerAgentStatus& s) { return s.closures_received == 1; },
                             kTestDeadline));
  uint64_t beats = agent->status().heartbeats;
  EXPECT_TRUE(agent->WaitFor(
      [beats](const WorkerAgentStatus& s) { return s.heartbeats >= beats + 5; }, kTestDeadline))
      << "the agent loop stalled while a closure ran";
  EXPECT_EQ(value->status(), clients::RemoteValueStatus::kPending);
  release.set_value();
  EXPECT_EQ(FetchOrDie(*value), "unblocked");
  // The dispatcher answers the report after the coordinator may have the result.
  EXPECT_TRUE(agent->WaitFor([](const WorkerAgentStatus& s) { return s.closure_reports_sent == 1; },
                             kTestDeadline));
  EXPECT_EQ(agent->status().closures_run, 1u);
  agent->Stop();
}

TEST(WorkerClosures, ACancelledClosureNotStartedIsDroppedAndARunningOneSeesItsCancel) {
  ClosureDispatcher dispatcher;
  auto agent = MakeAgent(dispatcher.address(), "agent-a", 1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> started{false};
  std::atomic<bool> saw_cancel{false};
  std::atomic<int> second_runs{0};
  ASSERT_TRUE(agent
                  ->RegisterFunction("stubborn",
                                     [released, &started, &saw_cancel](const ClosureCall& call) {
                                       started = true;
                                       // Ignores the cancel until the test lets it go.
                                       while (!call.cancelled()) call.SleepFor(kPollInterval);
                                       saw_cancel = true;
                                       released.wait();
                                       return ClosureOutput::Result("late");
                                     })
                  .ok());
  ASSERT_TRUE(agent
                  ->RegisterFunction("second",
                                     [&second_runs](const ClosureCall&) {
                                       ++second_runs;
                                       return ClosureOutput::Result("ran");
                                     })
                  .ok());
  ASSERT_TRUE(agent->Start().ok());
  ASSERT_TRUE(
      agent->WaitFor([](const WorkerAgentStatus& s) { return s.registered; }, kTestDeadline));
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto stubborn = coordinator->Schedule("stubborn");
  ASSERT_TRUE(stubborn.ok());
  // Running, not only received: a cancel that comes first drops it unrun.
  ASSERT_TRUE(WaitUntil([&] { return started.load(); }));
  ASSERT_TRUE(stubborn->Cancel().ok());
  EXPECT_TRUE(WaitUntil([&] { return saw_cancel.load(); })) << "the function never saw it";
  // Its slot is free at the dispatcher, so the next closure comes while the
  // stubborn function still holds the worker's only thread: it waits there
  // until it is cancelled too, and is dropped without running.
  auto second = coordinator->Schedule("second");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(agent->WaitFor([](const WorkerAgentStatus& s) { return s.closures_received == 2; },
                             kTestDeadline));
  ASSERT_TRUE(second->Cancel().ok());
  ASSERT_TRUE(agent->WaitFor([](const WorkerAgentStatus& s) { return s.closures_cancelled == 2; },
                             kTestDeadline));
  release.set_value();
  EXPECT_TRUE(agent->WaitFor([](const WorkerAgentStatus& s) { return s.closures_dropped == 1; },
                             kTestDeadline));
  EXPECT_EQ(second_runs.load(), 0);
  EXPECT_EQ(second->FetchFor(kFetchDeadline).status().code(), StatusCode::kCancelled);
  // The stubborn one's result came late: ignored.
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.late_reports_ignored == 1 && c.results_accepted == 0;
  }));
  EXPECT_EQ(stubborn->FetchFor(kFetchDeadline).status().code(), StatusCode::kCancelled);
  agent->Stop();
}

TEST(WorkerClosures, OutcomesReadyTogetherGoInOneReport) {
  ClosureDispatcher dispatcher;
  auto agent = MakeAgent(dispatcher.address(), "agent-a", 8);
  ASSERT_TRUE(agent
                  ->RegisterFunction(
                      "quick",
                      [](const ClosureCall& call) {
                        return ClosureOutput::Result(std::string(call.args()));
                      },
                      clients::ClosureFunctionOptions{.run_inline = true})
                  .ok());
  ASSERT_TRUE(agent->Start().ok());
  ASSERT_TRUE(
      agent->WaitFor([](const WorkerAgentStatus& s) { return s.registered; }, kTestDeadline));
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<clients::RemoteValue> values;
  for (int i = 0; i < 400; ++i)
    values.push_back(*coordinator->Schedule("quick", std::to_string(i)));
  for (int i = 0; i < 400; ++i) EXPECT_EQ(FetchOrDie(values[i]), std::to_string(i));
  EXPECT_TRUE(agent->WaitFor(
      [](const WorkerAgentStatus& s) { return s.closure_reports_sent == 400; }, kTestDeadline));
  WorkerAgentStatus s = agent->status();
  EXPECT_LT(s.closure_report_calls, 400u) << "outcomes were reported one call each";
  agent->Stop();
}

TEST(WorkerClosures, AThrowingFunctionFailsItsClosureNotTheWorker) {
  ClosureDispatcher dispatcher;
  auto agent = MakeAgent(dispatcher.address(), "agent-a", 1);
  ASSERT_TRUE(agent
                  ->RegisterFunction("throws",
                                     [](const ClosureCall&) -> ClosureOutput {
                                       throw std::runtime_error("kaboom");
                                     })
                  .ok());
  ASSERT_TRUE(agent->Start().ok());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto value = coordinator->Schedule("throws", "");
  ASSERT_TRUE(value.ok());
  auto fetched = value->FetchFor(kFetchDeadline);
  ASSERT_FALSE(fetched.ok());
  EXPECT_NE(fetched.status().message().find("function throws threw: kaboom"), std::string::npos)
      << fetched.status().ToString();
  EXPECT_TRUE(agent->status().running);
  agent->Stop();
}

TEST(WorkerClosures, AWorkerThatReportsItselfUnavailableLeavesItsClosuresToAnother) {
  // The dispatcher pauses such a worker only until its next heartbeat, so
  // the closure may bounce back to it a few times: attempts are unlimited.
  ClosureDispatcher dispatcher({MaxClosureAttemptsFlag(0)});
  auto draining = MakeAgent(dispatcher.address(), "agent-draining", 1);
  ASSERT_TRUE(
      draining
          ->RegisterFunction(
              "work", [](const ClosureCall&) { return ClosureOutput::Unavailable("draining"); })
          .ok());
  ASSERT_TRUE(draining->Start().ok());
  ASSERT_TRUE(
      draining->WaitFor([](const WorkerAgentStatus& s) { return s.registered; }, kTestDeadline));
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto first = coordinator->Schedule("work", "");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(draining->WaitFor(
      [](const WorkerAgentStatus& s) { return s.closure_reports_sent >= 1; }, kTestDeadline));
  EXPECT_EQ(first->status(), clients::RemoteValueStatus::kPending) << "it must be retried";

  auto healthy = MakeAgent(dispatcher.address(), "agent-healthy", 8);
  ASSERT_TRUE(healthy
                  ->RegisterFunction("work",
                                     [](const ClosureCall& call) {
                                       return ClosureOutput::Result(call.worker_address());
                                     })
                  .ok());
  ASSERT_TRUE(healthy->Start().ok());
  EXPECT_EQ(FetchOrDie(*first), "agent-healthy");
  std::vector<clients::RemoteValue> more;
  for (int i = 0; i < 5; ++i) more.push_back(*coordinator->Schedule("work", ""));
  for (auto& value : more) EXPECT_EQ(FetchOrDie(value), "agent-healthy");
  EXPECT_TRUE(coordinator->Join().ok()) << "unavailability is not the coordinator's error";
  draining->Stop();
  healthy->Stop();
}

TEST(WorkerClosures, AnOutcomeOfAnEarlierConnectionIsDroppedAndTheRetryDelivers) {
  ClosureDispatcher dispatcher;
  auto agent = MakeAgent(dispatcher.address(), "agent-a", 1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  // Shared, so a run the test no longer waits for touches nothing freed; the
  // promise, destroyed before the agent, unblocks any run still waiting.
  auto calls = std::make_shared<std::atomic<int>>(0);
  ASSERT_TRUE(agent
                  ->RegisterFunction("gated",
                                     [released, calls](const ClosureCall& call) {
                                       ++*calls;
                                       released.wait();
                                       return ClosureOutput::Result(std::string(call.args()));
                                     })
                  .ok());
  ASSERT_TRUE(agent->Start().ok());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto value = coordinator->Schedule("gated", "survived");
  ASSERT_TRUE(value.ok());
  ASSERT_TRUE(WaitUntil([&] { return calls->load() == 1; }));
  uint64_t incarnation = agent->status().dispatcher_incarnation;
  dispatcher.Kill9();
  dispatcher.Start();
  // The restarted dispatcher puts the closure back and pushes it again; the
  // first run still holds the only slot.
  ASSERT_TRUE(agent->WaitFor(
      [incarnation](const WorkerAgentStatus& s) {
        return s.registered && s.dispatcher_incarnation != incarnation && s.closures_received >= 2;
      },
      kTestDeadline));
  release.set_value();
  EXPECT_EQ(FetchOrDie(*value), "survived");
  EXPECT_TRUE(agent->WaitFor(
      [](const WorkerAgentStatus& s) {
        return s.closure_reports_dropped >= 1 && s.closure_reports_sent >= 1;
      },
      kTestDeadline))
      << "the first run's outcome belongs to a connection that is gone";
  EXPECT_EQ(calls->load(), 2);
  agent->Stop();
}

TEST(WorkerClosures, APerWorkerResourceIsBuiltOncePerProcessForConcurrentClosures) {
  ClosureDispatcher dispatcher;
  auto agent = MakeAgent(dispatcher.address(), "agent-a", 4);
  auto builds = std::make_shared<std::atomic<int>>(0);
  ASSERT_TRUE(agent
                  ->RegisterFunction("build",
                                     [builds](const ClosureCall& call) {
                                       ++*builds;
                                       return ClosureOutput::Result("built " +
                                                                    std::string(call.args()));
                                     })
                  .ok());
  ASSERT_TRUE(agent
                  ->RegisterFunction("use",
                                     [](const ClosureCall& call) {
                                       return ClosureOutput::Result(call.resources().at(0));
                                     })
                  .ok());
  ASSERT_TRUE(agent->Start().ok());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto resource = coordinator->CreatePerWorkerResource("build", "table");
  ASSERT_TRUE(resource.ok()) << resource.status().ToString();
  std::vector<clients::RemoteValue> values;
  for (int i = 0; i < 20; ++i) values.push_back(*coordinator->Schedule("use", "", {*resource}));
  for (auto& value : values) EXPECT_EQ(FetchOrDie(value), "built table");
  EXPECT_EQ(builds->load(), 1);
  EXPECT_EQ(agent->status().resources_built, 1u);
  agent->Stop();
}

TEST(WorkerClosures, FunctionsAreRegisteredOnceAndOnlyBeforeStart) {
  ClosureDispatcher dispatcher;
  auto agent = MakeAgent(dispatcher.address(), "agent-a", 1);
  auto noop = [](const ClosureCall&) { return ClosureOutput::Result(""); };
  EXPECT_TRUE(agent->RegisterFunction("noop", noop).ok());
  EXPECT_EQ(agent->RegisterFunction("noop", noop).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(agent->RegisterFunction("", noop).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(agent->RegisterFunction("empty", nullptr).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(agent->Start().ok());
  EXPECT_EQ(agent->RegisterFunction("late", noop).code(), StatusCode::kFailedPrecondition);
  agent->Stop();
}

}  // namespace
}  // namespace dispatch::testing
