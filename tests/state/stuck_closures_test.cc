// The closure watchdog's decision (state/stuck_closures.h): one episode per
// stretch of running closures without a finished run, ended by a worker's
// outcome or by nothing running; and the bounded listing of what runs.

#include "state/stuck_closures.h"

#include <gtest/gtest.h>

#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table
using Change = StuckClosureWatch::Change;

constexpr int64_t kSecond = 1000000;

// The effects of an update at `time` that ends closure 1's run on worker 1
// as `outcome`; `reported`: the update names the run's worker.
Effects RunEndedAt(int64_t time, ClosureState outcome = ClosureState::FINISHED,
                   bool reported = true) {
  Effects effects;
  effects.time_micros = time;
  effects.runs_ended.push_back({1, 1, 1, outcome, reported});
  return effects;
}

TEST(StuckClosureWatch, RaisesOnceWhenClosuresRunAndNoneFinishes) {
  StuckClosureWatch watch(5 * kSecond);
  EXPECT_EQ(watch.Check(0, 0), Change::kNone);
  EXPECT_EQ(watch.Check(1 * kSecond, 2), Change::kNone);  // running from here
  EXPECT_EQ(watch.Check(5 * kSecond, 2), Change::kNone);
  EXPECT_EQ(watch.Check(6 * kSecond, 2), Change::kBecameStuck);
  EXPECT_TRUE(watch.stuck());
  EXPECT_EQ(watch.quiet_since_micros(), 1 * kSecond);
  for (int64_t t = 7; t < 100; ++t) EXPECT_EQ(watch.Check(t * kSecond, 2), Change::kNone);
  EXPECT_EQ(watch.episodes(), 1u);
}

TEST(StuckClosureWatch, NeverRaisesWhileRunsKeepFinishing) {
  StuckClosureWatch watch(5 * kSecond);
  for (int64_t t = 0; t < 100; ++t) {
    // A run finishes every 4 s: never 5 s without one.
    if (t % 4 == 0) watch.OnApplied(RunEndedAt(t * kSecond));
    EXPECT_EQ(watch.Check(t * kSecond, 3), Change::kNone) << "at " << t << " s";
  }
  EXPECT_EQ(watch.episodes(), 0u);
}

TEST(StuckClosureWatch, NothingRunningIsNotStuck) {
  StuckClosureWatch watch(1 * kSecond);
  for (int64_t t = 0; t < 100; ++t) EXPECT_EQ(watch.Check(t * kSecond, 0), Change::kNone);
  EXPECT_EQ(watch.episodes(), 0u);
}

TEST(StuckClosureWatch, AFinishedRunEndsTheEpisodeAndANewOneNeedsTheFullThreshold) {
  StuckClosureWatch watch(5 * kSecond);
  watch.Check(0, 1);
  EXPECT_EQ(watch.Check(5 * kSecond, 1), Change::kBecameStuck);
  watch.OnApplied(RunEndedAt(7 * kSecond));
  EXPECT_EQ(watch.Check(8 * kSecond, 1), Change::kMovingAgain);
  EXPECT_FALSE(watch.stuck());
  EXPECT_EQ(watch.Check(11 * kSecond, 1), Change::kNone);  // 4 s after the finish
  EXPECT_EQ(watch.Check(12 * kSecond, 1), Change::kBecameStuck);
  EXPECT_EQ(watch.episodes(), 2u);
}

TEST(StuckClosureWatch, AFailureReportedByAWorkerIsProgressOneByTheDispatcherIsNot) {
  StuckClosureWatch watch(5 * kSecond);
  watch.Check(0, 1);
  // Ended by the dispatcher (a deadline, a put back): the workers did nothing.
  watch.OnApplied(RunEndedAt(3 * kSecond, ClosureState::FAILED, /*reported=*/false));
  watch.OnApplied(RunEndedAt(4 * kSecond, ClosureState::QUEUED, /*reported=*/false));
  EXPECT_EQ(watch.Check(5 * kSecond, 1), Change::kBecameStuck);
  // Failed by its worker: a run ended.
  watch.OnApplied(RunEndedAt(6 * kSecond, ClosureState::FAILED, /*reported=*/true));
  EXPECT_EQ(watch.Check(6 * kSecond, 1), Change::kMovingAgain);
}

TEST(StuckClosureWatch, NothingRunningEndsTheEpisode) {
  StuckClosureWatch watch(5 * kSecond);
  watch.Check(0, 1);
  EXPECT_EQ(watch.Check(5 * kSecond, 1), Change::kBecameStuck);
  EXPECT_EQ(watch.Check(6 * kSecond, 0), Change::kMovingAgain);
  // Running again: the stretch starts at the check that sees it.
  EXPECT_EQ(watch.Check(7 * kSecond, 1), Change::kNone);
  EXPECT_EQ(watch.Check(11 * kSecond, 1), Change::kNone);
  EXPECT_EQ(watch.Check(12 * kSecond, 1), Change::kBecameStuck);
}

TEST(StuckClosureWatch, ThresholdZeroIsOff) {
  StuckClosureWatch watch(0);
  for (int64_t t = 0; t < 100; ++t) EXPECT_EQ(watch.Check(t * kSecond * 1000, 5), Change::kNone);
}

TEST(ListRunning, ListsAssignedClosuresLowestIdsFirstBoundedByMax) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "tcp:w1:1")));
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(Applies(state, ScheduleClosure(id, 7, "block")));
  for (uint64_t id : {4, 2, 5}) ASSERT_TRUE(Applies(state, AssignClosure(id, 1, 1)));
  std::vector<RunningClosure> all = ListRunning(state, 10);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].closure_id, 2u);
  EXPECT_EQ(all[1].closure_id, 4u);
  EXPECT_EQ(all[0].worker_id, 1u);
  EXPECT_EQ(all[0].worker_address, "tcp:w1:1");
  EXPECT_EQ(all[0].function, "block");
  EXPECT_EQ(all[0].attempt, 1u);
  EXPECT_EQ(ListRunning(state, 2).size(), 2u);
}

}  // namespace
}  // namespace dispatch::state
