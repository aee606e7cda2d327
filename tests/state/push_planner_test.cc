// What goes with a push (state/push_planner.h): the closures still assigned
// to the worker, each with its inputs in order, one over the push limit
// refused, and the planted bug that drops the inputs.

#include "state/push_planner.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/state/planner_test_support.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

// Worker 1; closures 1 ("aaaa") and 2 ("bbbbbbbb") of coordinator 7 finished
// on it; closure 3 takes their results (2 first, then 1) and is assigned to
// worker 1; closure 4, with no inputs, too; closure 5 is queued.
DispatcherState TwoInputs() {
  DispatcherState state;
  ApplyEach(state, RegisterWorker(1, "a"), ScheduleClosure(1, 7), ScheduleClosure(2, 7),
            AssignClosure(1, 1, 1), FinishClosure(1, 1, 1, "aaaa"), AssignClosure(2, 1, 1),
            FinishClosure(2, 1, 1, "bbbbbbbb"),
            ScheduleClosureAfter(3, 7, "noop", "xy", 0, {}, {2, 1}), AssignClosure(3, 1, 1),
            ScheduleClosure(4, 7), AssignClosure(4, 1, 1), ScheduleClosure(5, 7));
  return state;
}

TEST(PushPlanner, EachClosureStillAssignedThereGoesWithItsInputsInOrder) {
  const DispatcherState state = TwoInputs();
  // 5 is queued, 1 is done, 9 is unknown: left out.
  Result<std::vector<PushedClosure>> plan = PlanPush(state, 1, {4, 5, 3, 1, 9}, kMaxPushBytes, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].run.closure_id, 4u);
  EXPECT_EQ((*plan)[0].run.attempt, 1u);
  EXPECT_EQ((*plan)[0].closure, state.FindClosure(4));
  EXPECT_TRUE((*plan)[0].inputs.empty());
  EXPECT_TRUE((*plan)[0].refused.ok());
  EXPECT_EQ((*plan)[1].run.closure_id, 3u);
  EXPECT_EQ((*plan)[1].inputs, (IdList{2, 1}));
  EXPECT_TRUE((*plan)[1].refused.ok());

  // Another worker's push carries none of them.
  Result<std::vector<PushedClosure>> other = PlanPush(state, 2, {3, 4}, kMaxPushBytes, {});
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());
}

TEST(PushPlanner, AClosureWhoseBytesWithItsInputsExceedAPushIsRefused) {
  const DispatcherState state = TwoInputs();
  // Function "noop", args "xy", inputs of 8 and 4 bytes: 18 in all.
  Result<std::vector<PushedClosure>> fits = PlanPush(state, 1, {3}, 18, {});
  ASSERT_TRUE(fits.ok());
  ASSERT_EQ(fits->size(), 1u);
  EXPECT_TRUE((*fits)[0].refused.ok());

  Result<std::vector<PushedClosure>> over = PlanPush(state, 1, {3, 4}, 17, {});
  ASSERT_TRUE(over.ok());
  ASSERT_EQ(over->size(), 2u);
  EXPECT_EQ((*over)[0].refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE((*over)[0].refused.message().find("closure 3 with its 2 input results takes 18 bytes"),
            std::string::npos)
      << (*over)[0].refused.ToString();
  EXPECT_TRUE((*over)[0].inputs.empty());
  EXPECT_TRUE((*over)[1].refused.ok());  // no inputs: only its own bytes count
}

TEST(PushPlanner, ThePlantedBugPushesClosuresWithoutTheirInputs) {
  const DispatcherState state = TwoInputs();
  ClosurePolicy buggy;
  buggy.planted_bug = PlantedBug::kPushNoInputs;
  Result<std::vector<PushedClosure>> plan = PlanPush(state, 1, {3}, kMaxPushBytes, buggy);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_TRUE((*plan)[0].inputs.empty());
  EXPECT_TRUE((*plan)[0].refused.ok());
}

}  // namespace
}  // namespace dispatch::state
