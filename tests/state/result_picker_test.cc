// Which outcomes a coordinator session hands out (state/result_picker.h):
// those owed, oldest first, released ones forgotten, within the call's count
// and byte limits (the first always goes), and the planted bug that drops
// some for good.

#include "state/result_picker.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "tests/state/planner_test_support.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

// Coordinator 7: closures 1..6 on worker 1. 1, 2 and 5 finished with results
// of 10, 20 and 30 bytes; 3 failed with "boom"; 4 is running; 6 is queued.
// Coordinator 8 has closure 7, finished.
DispatcherState Mixed() {
  DispatcherState state;
  ApplyEach(state, RegisterWorker(1, "a"));
  for (uint64_t id = 1; id <= 6; ++id) ApplyEach(state, ScheduleClosure(id, 7));
  ApplyEach(state, ScheduleClosure(7, 8));
  ApplyEach(state, AssignClosure(1, 1, 1), FinishClosure(1, 1, 1, std::string(10, 'a')),
            AssignClosure(2, 1, 1), FinishClosure(2, 1, 1, std::string(20, 'b')),
            AssignClosure(3, 1, 1), FailClosure(3, 1, 1, "boom"), AssignClosure(4, 1, 1),
            AssignClosure(5, 1, 1), FinishClosure(5, 1, 1, std::string(30, 'c')),
            AssignClosure(7, 1, 1), FinishClosure(7, 1, 1, "x"));
  return state;
}

TEST(ResultPicker, ANewSessionOwesEveryDoneOutcomeNotReleasedInIdOrder) {
  DispatcherState state = Mixed();
  EXPECT_EQ(OwedOutcomes(state, {}, 7), (IdList{1, 2, 3, 5}));
  EXPECT_EQ(OwedOutcomes(state, {2}, 7), (IdList{1, 3, 5}));  // its release is pending
  ApplyEach(state, ReleaseClosure(1));
  EXPECT_EQ(OwedOutcomes(state, {}, 7), (IdList{2, 3, 5}));
  EXPECT_EQ(OwedOutcomes(state, {}, 8), (IdList{7}));
  EXPECT_TRUE(OutcomeOwed(state, {}, 3));
  EXPECT_FALSE(OutcomeOwed(state, {}, 4));   // running
  EXPECT_FALSE(OutcomeOwed(state, {}, 1));   // released
  EXPECT_FALSE(OutcomeOwed(state, {3}, 3));  // release pending
}

TEST(ResultPicker, ReleasedOutcomesAtTheFrontAreForgotten) {
  DispatcherState state = Mixed();
  ApplyEach(state, ReleaseClosure(1));
  const std::deque<uint64_t> undelivered{1, 2, 5, 3};
  EXPECT_EQ(ForgottenAtFront(state, {}, undelivered), 1u);
  EXPECT_EQ(ForgottenAtFront(state, {2}, undelivered), 2u);
  EXPECT_EQ(ForgottenAtFront(state, {2, 3, 5}, undelivered), 4u);
  EXPECT_EQ(ForgottenAtFront(state, {}, {}), 0u);
}

TEST(ResultPicker, AnAnswerTakesOwedOutcomesInOrderUpToItsCount) {
  DispatcherState state = Mixed();
  const std::deque<uint64_t> undelivered{5, 1, 2, 3};
  ResultPick two = PickResults(state, {1}, undelivered, 2, {}, {});
  EXPECT_EQ(two.ids, (IdList{5, 2}));
  EXPECT_EQ(two.taken, 3u);  // 1 forgotten on the way

  ResultPick all = PickResults(state, {}, undelivered, 0, {}, {});
  EXPECT_EQ(all.ids, (IdList{5, 1, 2, 3}));
  EXPECT_EQ(all.taken, 4u);

  ResultLimits three_a_call;
  three_a_call.max_results_per_call = 3;
  ResultPick capped = PickResults(state, {}, undelivered, 0, three_a_call, {});
  EXPECT_EQ(capped.ids, (IdList{5, 1, 2}));
  ResultPick asked = PickResults(state, {}, undelivered, 8, three_a_call, {});
  EXPECT_EQ(asked.ids, (IdList{5, 1, 2}));
}

TEST(ResultPicker, AnAnswerStopsBeforeTheOutcomeThatWouldPassTheByteBudget) {
  DispatcherState state = Mixed();
  const std::deque<uint64_t> undelivered{1, 2, 3, 5};  // 10, 20, 4 and 30 bytes
  ResultLimits budget;
  budget.max_result_bytes_per_call = 34;
  ResultPick pick = PickResults(state, {}, undelivered, 0, budget, {});
  EXPECT_EQ(pick.ids, (IdList{1, 2, 3}));
  EXPECT_EQ(pick.taken, 3u);  // 5 waits for the next call

  budget.max_result_bytes_per_call = 5;
  ResultPick first = PickResults(state, {}, {5, 1}, 0, budget, {});
  EXPECT_EQ(first.ids, (IdList{5}));  // the first goes, whatever its size
  EXPECT_EQ(first.taken, 1u);
}

TEST(ResultPicker, ThePlantedBugDropsTheOutcomesOfClosureIdsThatAreMultiplesOfFive) {
  DispatcherState state = Mixed();
  ClosurePolicy buggy;
  buggy.planted_bug = PlantedBug::kForgetOutcome;
  ResultPick pick = PickResults(state, {}, {1, 5, 2}, 0, {}, buggy);
  EXPECT_EQ(pick.ids, (IdList{1, 2}));
  EXPECT_EQ(pick.taken, 3u);
}

}  // namespace
}  // namespace dispatch::state
