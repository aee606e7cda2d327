// Errors: a user error is raised exactly once (by the next Schedule, Join or
// Done), cancels the coordinator's queued closures, and later schedules work;
// a closure that kills every worker it runs on stops after
// max_closure_attempts, without becoming the coordinator's error; transient
// errors are retried up to the limit.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>

#include "tests/closures/closure_test_support.h"

namespace dispatch::testing {
namespace {

using clients::RemoteValue;
using clients::RemoteValueStatus;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ClosureErrors, AUserErrorIsRaisedOnceByScheduleAndCancelsQueuedClosures) {
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto boom = coordinator->Schedule("fail", "boom");
  ASSERT_TRUE(boom.ok());
  std::vector<RemoteValue> queued;
  for (int i = 0; i < 20; ++i) queued.push_back(*coordinator->Schedule("sleep", "10"));
  // Schedule() returns before the dispatcher has the closure: with a worker
  // already there, "boom" could fail before the later schedules arrive, and
  // those would then be refused (raising the error) or run, not cancelled.
  // So the one-slot worker starts only once all 21 wait in the queue.
  ASSERT_TRUE(WaitForCounters(dispatcher.address(),
                              [](const ClosureCounters& c) { return c.queued == 21; }));
  auto worker = StartClosureWorker(dispatcher.address(), 1);

  auto fetched = boom->FetchFor(kFetchDeadline);
  ASSERT_FALSE(fetched.ok());
  EXPECT_TRUE(Contains(fetched.status().message(), "boom")) << fetched.status().ToString();
  EXPECT_EQ(boom->status(), RemoteValueStatus::kFailed);
  for (auto& value : queued) {
    auto result = value.FetchFor(kFetchDeadline);
    EXPECT_EQ(result.status().code(), StatusCode::kCancelled) << result.status().ToString();
    EXPECT_EQ(value.status(), RemoteValueStatus::kCancelled);
  }

  auto raised = coordinator->Schedule("echo", "after the error");
  ASSERT_FALSE(raised.ok()) << "the first error was not raised by Schedule";
  EXPECT_TRUE(Contains(raised.status().message(), "boom")) << raised.status().ToString();
  // Exactly once: everything works again.
  auto later = coordinator->Schedule("echo", "after the error");
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ(FetchOrDie(*later), "after the error");
  EXPECT_TRUE(coordinator->Join().ok());
  auto done = coordinator->Done();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(*done);
}

TEST(ClosureErrors, AUserErrorIsRaisedOnceByJoin) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  ASSERT_TRUE(coordinator->Schedule("fail", "join sees me").ok());
  Status first = coordinator->Join();
  EXPECT_FALSE(first.ok());
  EXPECT_TRUE(Contains(first.message(), "join sees me")) << first.ToString();
  EXPECT_TRUE(coordinator->Join().ok()) << "the error was raised twice";
  auto done = coordinator->Done();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(*done);
}

TEST(ClosureErrors, AUserErrorIsRaisedOnceByDone) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto value = coordinator->Schedule("fail", "done sees me");
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE(WaitUntil([&] { return value->status() == RemoteValueStatus::kFailed; }));
  auto first = coordinator->Done();
  ASSERT_FALSE(first.ok());
  EXPECT_TRUE(Contains(first.status().message(), "done sees me")) << first.status().ToString();
  auto second = coordinator->Done();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(*second);
}

TEST(ClosureErrors, AClosureThatCrashesEveryWorkerStopsAfterMaxClosureAttempts) {
  ClosureDispatcher dispatcher({MaxClosureAttemptsFlag(2)});
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(StartClosureWorker(dispatcher.address()));
  }
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto crash = coordinator->Schedule("crash", "");
  ASSERT_TRUE(crash.ok());
  auto fetched = crash->FetchFor(kFetchDeadline);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(fetched.status().message(), "max_closure_attempts 2"))
      << "the error must say why it stopped: " << fetched.status().ToString();
  // A dead worker's socket closes a moment before its exit can be waited for.
  auto dead = [&] {
    int n = 0;
    for (auto& worker : workers) {
      if (!worker->process().running() ||
          worker->process().Wait(std::chrono::milliseconds(0)).has_value()) {
        ++n;
      }
    }
    return n;
  };
  EXPECT_TRUE(WaitUntil([&] { return dead() == 2; }))
      << "the closure should have taken down exactly max_closure_attempts workers, not " << dead();
  EXPECT_GE(GetClosureCounters(dispatcher.address()).attempts_exhausted, 1u);
  // The survivor still serves.
  auto echo = coordinator->Schedule("echo", "still here");
  if (!echo.ok()) echo = coordinator->Schedule("echo", "still here");  // the error, raised once
  ASSERT_TRUE(echo.ok()) << echo.status().ToString();
  EXPECT_EQ(FetchOrDie(*echo), "still here");
}

// A closure whose workers died under it until its attempts ran out fails,
// with an error saying so, but its workers failed, not its function: it is
// not the coordinator's first error and cancels nothing (before, it cancelled
// the coordinator's queued closures and was raised by the next call).
TEST(ClosureErrors, AttemptsUsedUpByDeadWorkersAreNoFirstErrorAndCancelNothing) {
  ClosureDispatcher dispatcher({MaxClosureAttemptsFlag(1)});
  auto first = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto crash = coordinator->Schedule("crash", "");
  ASSERT_TRUE(crash.ok());
  // Queued behind it on the only slot; still queued when it kills the worker.
  std::vector<RemoteValue> queued;
  for (int i = 0; i < 3; ++i) queued.push_back(*coordinator->Schedule("echo", std::to_string(i)));
  auto fetched = crash->FetchFor(kFetchDeadline);
  ASSERT_FALSE(fetched.ok());
  EXPECT_TRUE(Contains(fetched.status().message(), "max_closure_attempts 1"))
      << fetched.status().ToString();
  EXPECT_TRUE(Contains(fetched.status().message(), "its workers failed, not the function"))
      << fetched.status().ToString();
  EXPECT_EQ(GetClosureCounters(dispatcher.address()).attempts_exhausted, 1u);
  EXPECT_EQ(GetClosureCounters(dispatcher.address()).cancelled, 0u);
  for (auto& value : queued) EXPECT_EQ(value.status(), RemoteValueStatus::kPending);

  auto second = StartClosureWorker(dispatcher.address());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(FetchOrDie(queued[i]), std::to_string(i));
  EXPECT_TRUE(coordinator->Join().ok()) << "a worker failure is not the coordinator's error";
  auto later = coordinator->Schedule("echo", "no error to raise");
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ(FetchOrDie(*later), "no error to raise");
}

TEST(ClosureErrors, TransientErrorsAreRetriedUpToTheLimitThenSucceed) {
  TempDir dir;
  ClosureDispatcher dispatcher({TransientLimitFlag(3)});
  auto worker = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::string calls = dir.File("flaky_calls");
  auto value = coordinator->Schedule("flaky", "2:" + calls);
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(FetchOrDie(*value), "ok after 2");
  std::ifstream in(calls);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 3) << "two transient failures, then one success";
  EXPECT_EQ(GetClosureCounters(dispatcher.address()).transient_retries, 2u);
  EXPECT_TRUE(coordinator->Join().ok()) << "a transient error that was retried is no error";
}

TEST(ClosureErrors, ATransientErrorPastTheLimitFailsTheClosure) {
  ClosureDispatcher dispatcher({TransientLimitFlag(2)});
  auto worker = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto value = coordinator->Schedule("transient", "flaky dependency");
  ASSERT_TRUE(value.ok());
  auto fetched = value->FetchFor(kFetchDeadline);
  ASSERT_FALSE(fetched.ok());
  EXPECT_TRUE(Contains(fetched.status().message(), "flaky dependency"))
      << fetched.status().ToString();
  EXPECT_TRUE(Contains(fetched.status().message(), "transient")) << fetched.status().ToString();
  EXPECT_EQ(GetClosureCounters(dispatcher.address()).transient_retries, 2u);
  EXPECT_FALSE(coordinator->Join().ok()) << "it became the coordinator's error";
}

}  // namespace
}  // namespace dispatch::testing
