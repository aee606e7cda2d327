// Priority, cancel and timeout (issue 14 §3) end to end: a real dispatcher,
// dispatch-worker processes and the C++ Coordinator. The worker's single slot
// is held by a long `sleep` that the test cancels when it wants the queue to
// move, so the order closures run in (`append` writes it to a file) depends
// on nothing but the dispatcher's decisions.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/closures/closure_test_support.h"

namespace dispatch::testing {
namespace {

using clients::RemoteValue;
using clients::RemoteValueStatus;
using clients::ScheduleOptions;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

ScheduleOptions Priority(int32_t priority) {
  ScheduleOptions options;
  options.priority = priority;
  return options;
}

ScheduleOptions Timeout(std::chrono::milliseconds timeout) {
  ScheduleOptions options;
  options.timeout = timeout;
  return options;
}

// Occupies the worker's only slot until cancelled.
RemoteValue Block(clients::Coordinator& coordinator, const std::string& dispatcher) {
  Result<RemoteValue> blocker = coordinator.Schedule("sleep", "600000");
  EXPECT_TRUE(blocker.ok()) << blocker.status().ToString();
  EXPECT_TRUE(WaitForCounters(dispatcher, [](const ClosureCounters& c) { return c.assigned == 1; }));
  return *blocker;
}

// `dispatchctl cancel`: the operator's cancel of one coordinator's closures
// (Dispatcher.cancelCoordinator).
TEST(ClosurePolicy, DispatchctlCancelEndsEveryClosureOfOneCoordinatorWhichGoesOn) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  auto coordinator = MakeCoordinator(dispatcher.address(), 41);
  auto other = MakeCoordinator(dispatcher.address(), 42);
  TempDir dir;
  const std::string ran = dir.File("ran");
  RemoteValue blocker = Block(*coordinator, dispatcher.address());
  std::vector<RemoteValue> values{blocker};
  for (int i = 0; i < 5; ++i)
    values.push_back(*coordinator->Schedule("append", ran + ":" + std::to_string(i)));
  values.push_back(*coordinator->Schedule("append", ran + ":after", After({values.back()})));
  RemoteValue others = *other->Schedule("echo", "not cancelled");
  ASSERT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.queued == 6 && c.waiting == 1;
  }));

  const std::string at = "--dispatcher=" + dispatcher.address();
  CommandResult cancel = RunDispatchctl({at, "cancel", "41"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.output;
  EXPECT_TRUE(Contains(cancel.output, "cancelled 7 closures of coordinator 41")) << cancel.output;
  for (const RemoteValue& value : values) {
    EXPECT_EQ(value.FetchFor(kFetchDeadline).status().code(), StatusCode::kCancelled);
  }
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.cancelled_running == 1 && c.cancel_requested == 7;
  }));
  // The slot came free: the other coordinator's closure runs.
  EXPECT_EQ(FetchOrDie(others), "not cancelled");
  // Nothing left to cancel; an unknown coordinator and a bad id are refused.
  CommandResult again = RunDispatchctl({at, "cancel", "41"});
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(Contains(again.output, "cancelled 0 closures")) << again.output;
  CommandResult unknown = RunDispatchctl({at, "cancel", "43"});
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_TRUE(Contains(unknown.output, "coordinator 43")) << unknown.output;
  EXPECT_EQ(RunDispatchctl({at, "cancel", "x"}).exit_code, 2);
  // No first error: the coordinator joins and schedules on.
  EXPECT_TRUE(coordinator->Join().ok());
  Result<RemoteValue> later = coordinator->Schedule("echo", "goes on");
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ(FetchOrDie(*later), "goes on");
  EXPECT_TRUE(Lines(ran).empty());  // nothing cancelled ever ran
}

TEST(ClosurePolicy, UnderAFullQueueHighPriorityRunsBeforeTheRemainingLows) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  auto coordinator = MakeCoordinator(dispatcher.address());
  TempDir dir;
  const std::string order = dir.File("order");
  RemoteValue blocker = Block(*coordinator, dispatcher.address());

  constexpr int kLows = 200, kHighs = 20;
  std::vector<RemoteValue> values;
  for (int i = 0; i < kLows; ++i)
    values.push_back(*coordinator->Schedule("append", order + ":low" + std::to_string(i),
                                            Priority(-1)));
  ASSERT_TRUE(WaitForCounters(dispatcher.address(),
                              [&](const ClosureCounters& c) { return c.queued == kLows; }));
  for (int i = 0; i < kHighs; ++i)
    values.push_back(*coordinator->Schedule("append", order + ":high" + std::to_string(i),
                                            Priority(10)));
  ASSERT_TRUE(WaitForCounters(dispatcher.address(), [&](const ClosureCounters& c) {
    return c.queued == kLows + kHighs;
  }));
  ASSERT_TRUE(blocker.Cancel().ok());  // the slot comes free
  ASSERT_TRUE(coordinator->Join().ok());
  for (const RemoteValue& value : values) FetchOrDie(value);

  std::vector<std::string> expected;
  for (int i = 0; i < kHighs; ++i) expected.push_back("high" + std::to_string(i));
  for (int i = 0; i < kLows; ++i) expected.push_back("low" + std::to_string(i));
  EXPECT_EQ(Lines(order), expected);
}

TEST(ClosurePolicy, PrioritiesSurviveADispatcherRestart) {
  ClosureDispatcher dispatcher;
  TempDir dir;
  const std::string order = dir.File("order");
  std::vector<RemoteValue> values;
  {
    auto coordinator = MakeCoordinator(dispatcher.address(), 77);
    // No worker yet: everything waits in the queue.
    for (int i = 0; i < 6; ++i) {
      values.push_back(*coordinator->Schedule("append", order + ":p" + std::to_string(i % 3) +
                                                           "-" + std::to_string(i),
                                              Priority(i % 3)));
    }
    ASSERT_TRUE(WaitForCounters(dispatcher.address(),
                                [](const ClosureCounters& c) { return c.queued == 6; }));
    coordinator->Close();
  }
  dispatcher.Kill9();
  dispatcher.Start();
  auto coordinator = MakeCoordinator(dispatcher.address(), 77);
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  ASSERT_TRUE(coordinator->Join().ok());
  EXPECT_EQ(Lines(order), (std::vector<std::string>{"p2-2", "p2-5", "p1-1", "p1-4", "p0-0",
                                                    "p0-3"}));
}

TEST(ClosurePolicy, CancellingTenThousandQueuedClosures) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  auto coordinator = MakeCoordinator(dispatcher.address());
  TempDir dir;
  const std::string ran = dir.File("ran");
  RemoteValue blocker = Block(*coordinator, dispatcher.address());

  constexpr uint64_t kQueued = 10000;
  std::vector<RemoteValue> values;
  values.reserve(kQueued);
  for (uint64_t i = 0; i < kQueued; ++i)
    values.push_back(*coordinator->Schedule("append", ran + ":" + std::to_string(i)));
  ASSERT_TRUE(WaitUntil([&] {
    return std::all_of(values.begin(), values.end(),
                       [](const RemoteValue& v) { return v.closure_id() != 0; });
  }));
  std::vector<uint64_t> ids;
  for (const RemoteValue& value : values) ids.push_back(value.closure_id());
  auto states = coordinator->Cancel(ids);
  ASSERT_TRUE(states.ok()) << states.status().ToString();
  ASSERT_EQ(states->size(), kQueued);
  for (RemoteValueStatus status : *states) EXPECT_EQ(status, RemoteValueStatus::kCancelled);

  ClosureCounters after = GetClosureCounters(dispatcher.address());
  EXPECT_EQ(after.queued, 0u);  // the queue is empty
  EXPECT_EQ(after.cancel_requested, kQueued);
  EXPECT_EQ(after.assigned, 1u);  // the blocker runs on
  // Idempotent: cancelling them again changes nothing (before they are
  // fetched: a fetched closure is released, and then unknown).
  auto again = coordinator->Cancel({ids.front(), ids.back()});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(GetClosureCounters(dispatcher.address()).cancel_requested, kQueued);
  for (const RemoteValue& value : values) {
    Result<std::string> result = value.FetchFor(kFetchDeadline);
    ASSERT_EQ(result.status().code(), StatusCode::kCancelled) << result.status().ToString();
  }

  // The running one: cancelled, its worker told (its sleep ends early and
  // its report is ignored), and the dispatcher keeps serving. (Fetched only
  // after its late report came: a report for a released closure is
  // counted among the ignored ones, not as late.)
  ASSERT_TRUE(blocker.Cancel().ok());
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.cancelled_running == 1 && c.late_reports_ignored == 1;
  })) << "late reports ignored: " << GetClosureCounters(dispatcher.address()).late_reports_ignored;
  EXPECT_EQ(blocker.FetchFor(kFetchDeadline).status().code(), StatusCode::kCancelled);
  Result<RemoteValue> later = coordinator->Schedule("echo", "still serving");
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ(FetchOrDie(*later), "still serving");
  // Cancelling is no error of the coordinator's.
  EXPECT_TRUE(coordinator->Join().ok());
  // Nothing cancelled ever ran.
  EXPECT_TRUE(Lines(ran).empty());
  EXPECT_EQ(GetClosureCounters(dispatcher.address()).results_accepted, 1u);
}

TEST(ClosurePolicy, CancelLeavesAFinishedClosureAndNamesAnUnknownOne) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  auto coordinator = MakeCoordinator(dispatcher.address());
  Result<RemoteValue> done = coordinator->Schedule("echo", "done");
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE(coordinator->Join().ok());
  Status cancel = done->Cancel();
  EXPECT_EQ(cancel.code(), StatusCode::kFailedPrecondition) << cancel.ToString();
  EXPECT_TRUE(Contains(cancel.message(), "left as it is")) << cancel.ToString();
  EXPECT_EQ(FetchOrDie(*done), "done");

  auto unknown = coordinator->Cancel({987654321});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(unknown.status().message(), "closure 987654321"))
      << unknown.status().ToString();
}

TEST(ClosurePolicy, ASleepPastItsTimeoutFailsWithDeadlineExceeded) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  auto coordinator = MakeCoordinator(dispatcher.address());
  Result<RemoteValue> slow =
      coordinator->Schedule("sleep", "600000", Timeout(std::chrono::milliseconds(300)));
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  // Its worker was told: the sleep ends early, its report is ignored (the
  // closure is fetched, so released, only after that), and the slot runs
  // the next closure.
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.deadlines_exceeded == 1 && c.late_reports_ignored == 1;
  }));
  EXPECT_TRUE(WaitUntil([&] { return slow->status() == RemoteValueStatus::kFailed; }));
  Result<std::string> result = slow->FetchFor(kFetchDeadline);
  ASSERT_EQ(result.status().code(), StatusCode::kDeadlineExceeded) << result.status().ToString();
  EXPECT_TRUE(Contains(result.status().message(), "deadline exceeded"));
  EXPECT_TRUE(Contains(result.status().message(), "timeout of 300 ms"));
  Result<RemoteValue> next = coordinator->Schedule("echo", "next");
  ASSERT_TRUE(next.ok()) << next.status().ToString() << ": a timeout is no first error";
  EXPECT_EQ(FetchOrDie(*next), "next");
  EXPECT_TRUE(coordinator->Join().ok());
}

TEST(ClosurePolicy, AQueuedClosureTimesOutTooAndCancelsNothingElse) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  auto coordinator = MakeCoordinator(dispatcher.address());
  RemoteValue blocker = Block(*coordinator, dispatcher.address());
  Result<RemoteValue> timed =
      coordinator->Schedule("echo", "never", Timeout(std::chrono::milliseconds(100)));
  Result<RemoteValue> patient = coordinator->Schedule("echo", "patient");
  ASSERT_TRUE(timed.ok() && patient.ok());
  Result<std::string> result = timed->FetchFor(kFetchDeadline);
  ASSERT_EQ(result.status().code(), StatusCode::kDeadlineExceeded) << result.status().ToString();
  EXPECT_TRUE(Contains(result.status().message(), "queued")) << result.status().ToString();
  EXPECT_EQ(patient->status(), RemoteValueStatus::kPending);  // not cancelled by it
  ASSERT_TRUE(blocker.Cancel().ok());
  EXPECT_EQ(FetchOrDie(*patient), "patient");
  EXPECT_TRUE(coordinator->Join().ok());
}

TEST(ClosurePolicy, ADeadlineSurvivesADispatcherRestart) {
  ClosureDispatcher dispatcher;
  std::vector<RemoteValue> values;
  {
    auto coordinator = MakeCoordinator(dispatcher.address(), 78);
    // No worker: it waits in the queue until its deadline.
    ASSERT_TRUE(
        coordinator->Schedule("echo", "x", Timeout(std::chrono::milliseconds(1500))).ok());
    ASSERT_TRUE(WaitForCounters(dispatcher.address(),
                                [](const ClosureCounters& c) { return c.queued == 1; }));
    coordinator->Close();
  }
  dispatcher.Kill9();
  dispatcher.Start();
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.failed == 1 && c.queued == 0 && c.deadlines_exceeded == 1;
  }));
}

}  // namespace
}  // namespace dispatch::testing
