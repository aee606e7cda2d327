// One schedule call's decision (state/schedule_call_planner.h): the order
// refusal remembered → pending first error → retry → room → scheduled, what
// each answers, which plans read the call's closures, what is to be
// remembered, and the planted bug that skips the refusals. Every plan is
// applied to prove its Updates valid.

#include "state/schedule_call_planner.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "state/closure_planner.h"
#include "tests/state/planner_test_support.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

const std::string kNoop = "noop";
const RefusedSchedules kNoRefusals;

// A call of closures with these request ids; `reads` counts the times the
// plan read its closures.
ScheduleCallRequest Call(uint64_t coordinator_id, std::vector<uint64_t> request_ids, int* reads,
                         bool has_room = true) {
  ScheduleCallRequest request;
  request.coordinator_id = coordinator_id;
  request.request_ids = request_ids;
  request.closures = [request_ids, reads] {
    ++*reads;
    std::vector<NewClosure> closures;
    for (uint64_t request_id : request_ids)
      closures.push_back(
          NewClosure{0, capnp::Text::Reader(kNoop.data(), kNoop.size()), {}, {}, request_id});
    return closures;
  };
  request.has_room = has_room;
  return request;
}

// Coordinator 7 scheduled closure 1 (request 50) and closure 2 (request 51);
// closure 1 failed with "boom", the coordinator's pending first error.
DispatcherState UnderError() {
  DispatcherState state;
  ApplyEach(state, RegisterWorker(1, "a"), ScheduleClosure(1, 7, "noop", "", 50),
            ScheduleClosure(2, 7, "noop", "", 51), AssignClosure(1, 1, 1));
  EXPECT_TRUE(AppliesAll(state, PlanUserError(state, {1, 1, 1}, "boom", kStamp)));
  return state;
}

TEST(ScheduleCallPlanner, AFreshCallWaitsForRoomWithoutReadingItsClosuresThenIsScheduled) {
  DispatcherState state;
  ApplyEach(state, ScheduleClosure(1, 7));
  int reads = 0;
  Result<ScheduleCallPlan> waiting =
      PlanScheduleCall(state, kNoRefusals, {}, Call(7, {60, 61}, &reads, false), kStamp, {});
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->route, ScheduleRoute::kNeedsRoom);
  EXPECT_TRUE(waiting->updates.empty());
  EXPECT_EQ(reads, 0);

  Result<ScheduleCallPlan> plan =
      PlanScheduleCall(state, kNoRefusals, {}, Call(7, {60, 61}, &reads), kStamp, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(plan->route, ScheduleRoute::kScheduled);
  EXPECT_FALSE(plan->refused);
  EXPECT_EQ(plan->num_new, 2u);
  EXPECT_FALSE(plan->record_refusal);
  ASSERT_TRUE(AppliesAll(state, plan->updates));
  ASSERT_EQ(plan->ids.size(), 2u);
  EXPECT_EQ(state.FindClosureByRequest(7, 60)->id, plan->ids[0]);
  EXPECT_EQ(state.FindClosure(plan->ids[1])->state, ClosureState::QUEUED);
}

TEST(ScheduleCallPlanner, APendingFirstErrorRefusesANewCallClearsItAndIsRemembered) {
  DispatcherState state = UnderError();
  int reads = 0;
  // Refused before any room is asked for.
  Result<ScheduleCallPlan> plan =
      PlanScheduleCall(state, kNoRefusals, {}, Call(7, {60, 0}, &reads, false), kStamp, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->route, ScheduleRoute::kRefused);
  EXPECT_TRUE(plan->refused);
  EXPECT_EQ(plan->refusal.closure_id, 1u);
  EXPECT_EQ(plan->refusal.error, state.FindCoordinatorError(7)->error);
  EXPECT_TRUE(plan->record_refusal);
  EXPECT_EQ(plan->num_new, 0u);
  EXPECT_EQ(reads, 0);
  const uint64_t next_id = state.NextClosureId();
  ASSERT_TRUE(AppliesAll(state, plan->updates));
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);
  EXPECT_EQ(state.NextClosureId(), next_id);  // nothing scheduled
}

TEST(ScheduleCallPlanner, ACallOfNoClosuresRaisesAPendingErrorOrAnswersNothing) {
  DispatcherState state = UnderError();
  int reads = 0;
  Result<ScheduleCallPlan> raised =
      PlanScheduleCall(state, kNoRefusals, {}, Call(7, {}, &reads, false), kStamp, {});
  ASSERT_TRUE(raised.ok());
  EXPECT_TRUE(raised->refused);
  EXPECT_EQ(raised->refusal.closure_id, 1u);
  EXPECT_FALSE(raised->record_refusal);  // no request id to remember
  ASSERT_TRUE(AppliesAll(state, raised->updates));

  Result<ScheduleCallPlan> empty =
      PlanScheduleCall(state, kNoRefusals, {}, Call(7, {}, &reads, false), kStamp, {});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->route, ScheduleRoute::kRefused);
  EXPECT_EQ(empty->refusal.closure_id, 0u);  // no error: an empty answer
  EXPECT_TRUE(empty->updates.empty());
  EXPECT_EQ(reads, 0);
}

TEST(ScheduleCallPlanner, ARetryUnderAFirstErrorGetsItsIdsAndLeavesTheErrorPending) {
  DispatcherState state = UnderError();
  int reads = 0;
  Result<ScheduleCallPlan> plan =
      PlanScheduleCall(state, kNoRefusals, {}, Call(7, {51, 52}, &reads, false), kStamp, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->route, ScheduleRoute::kRetried);
  EXPECT_FALSE(plan->refused);
  EXPECT_FALSE(plan->record_refusal);
  ASSERT_EQ(plan->ids.size(), 2u);
  EXPECT_EQ(plan->ids[0], 2u);
  ASSERT_TRUE(AppliesAll(state, plan->updates));
  EXPECT_EQ(state.FindClosure(plan->ids[1])->state, ClosureState::CANCELLED);
  EXPECT_NE(state.FindCoordinatorError(7), nullptr);
}

TEST(ScheduleCallPlanner, ALateCopyOfARefusedCallGetsTheSameRefusalUnlessTheBugIsPlanted) {
  DispatcherState state = UnderError();
  RefusedSchedules refused;
  int reads = 0;
  // The first copy is refused, the error cleared, the refusal remembered.
  Result<ScheduleCallPlan> first =
      PlanScheduleCall(state, refused, {}, Call(7, {60}, &reads), kStamp, {});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->record_refusal);
  ASSERT_TRUE(AppliesAll(state, first->updates));
  refused.Record(7, {60}, first->refusal);

  // The late copy: the same refusal, nothing planned (its closures read once,
  // to see whether it also retries scheduled ones).
  Result<ScheduleCallPlan> copy =
      PlanScheduleCall(state, refused, {}, Call(7, {60}, &reads, false), kStamp, {});
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy->route, ScheduleRoute::kRefusedAgain);
  EXPECT_TRUE(copy->refused);
  EXPECT_EQ(copy->refusal.closure_id, first->refusal.closure_id);
  EXPECT_EQ(copy->refusal.error, first->refusal.error);
  EXPECT_FALSE(copy->record_refusal);
  EXPECT_TRUE(copy->updates.empty());
  EXPECT_EQ(reads, 1);

  // Resent with a scheduled closure: every closure gets an id, the refused
  // one cancelled at once.
  Result<ScheduleCallPlan> merged =
      PlanScheduleCall(state, refused, {}, Call(7, {51, 60}, &reads), kStamp, {});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->route, ScheduleRoute::kRefusedAgain);
  EXPECT_FALSE(merged->refused);
  ASSERT_EQ(merged->ids.size(), 2u);
  EXPECT_EQ(merged->ids[0], 2u);
  ASSERT_TRUE(AppliesAll(state, merged->updates));
  EXPECT_EQ(state.FindClosure(merged->ids[1])->state, ClosureState::CANCELLED);

  // Planted: the refusal is not looked for, and the copy is scheduled.
  DispatcherState fresh = UnderError();
  ASSERT_TRUE(AppliesAll(fresh, first->updates));
  ClosurePolicy buggy;
  buggy.planted_bug = PlantedBug::kForgetRefusals;
  Result<ScheduleCallPlan> forgot =
      PlanScheduleCall(fresh, refused, {}, Call(7, {60}, &reads), kStamp, buggy);
  ASSERT_TRUE(forgot.ok());
  EXPECT_EQ(forgot->route, ScheduleRoute::kScheduled);
  EXPECT_EQ(forgot->num_new, 1u);
}

TEST(ScheduleCallPlanner, AnInputWhoseReleaseIsPendingIsUnknown) {
  DispatcherState state;
  ApplyEach(state, RegisterWorker(1, "a"), ScheduleClosure(1, 7), AssignClosure(1, 1, 1),
            FinishClosure(1, 1, 1, "r"));
  ScheduleCallRequest request;
  request.coordinator_id = 7;
  request.request_ids = {60};
  request.closures = [] {
    NewClosure closure{0, capnp::Text::Reader(kNoop.data(), kNoop.size()), {}, {}, 60};
    closure.inputs = {1};
    return std::vector<NewClosure>{closure};
  };
  EXPECT_TRUE(PlanScheduleCall(state, kNoRefusals, {}, request, kStamp, {}).ok());
  const SortedIdSet released{1};
  Result<ScheduleCallPlan> plan =
      PlanScheduleCall(state, kNoRefusals, released, request, kStamp, {});
  EXPECT_EQ(plan.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace dispatch::state
