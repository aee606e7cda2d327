// Priority, cancel and timeout (issue 14 §3) in the pure state and its
// planners: the queue order by priority (FIFO within one) as the assignment
// planner sees it and as a snapshot keeps it; PlanSchedule's deadline;
// PlanCancel and PlanDeadlines, whose plans are applied to prove them valid.

#include "state/closure_endings.h"

#include <gtest/gtest.h>

#include "state/closure_planner.h"
#include "state/closure_requests.h"
#include "state/dispatcher_state.h"
#include "tests/state/planner_test_support.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

std::vector<uint64_t> RunIds(const std::vector<ClosureRun>& runs) {
  std::vector<uint64_t> out;
  for (const ClosureRun& run : runs) out.push_back(run.closure_id);
  return out;
}

// Worker 1; closures of coordinator 7 with these priorities, ids from 1, in order.
DispatcherState WithPriorities(const std::vector<int32_t>& priorities,
                               const std::string& function = "noop") {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterWorker(1, "a")));
  uint64_t id = 1;
  for (int32_t priority : priorities)
    EXPECT_TRUE(Applies(state, ScheduleClosure(id++, 7, function, "", 0, {}, priority)));
  return state;
}

TEST(ClosurePriority, HigherPriorityIsAssignedFirstFifoWithinAPriority) {
  DispatcherState state = WithPriorities({0, 5, -1, 5, 0, 9});
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::QUEUED)),
            (std::vector<uint64_t>{6, 2, 4, 1, 5, 3}));
  EXPECT_EQ(state.NextQueuedClosure()->id, 6u);
  AssignmentPlan plan = PlanAssignments(state, {Live(1, 4)}, 0, 0, kStamp);
  EXPECT_EQ(RunIds(plan.runs), (std::vector<uint64_t>{6, 2, 4, 1}));
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::QUEUED)), (std::vector<uint64_t>{5, 3}));
}

TEST(ClosurePriority, OrdersAcrossKindsOfClosure) {
  // Two kinds (noop, echo): each kind's queue is ordered, and the pass merges them.
  DispatcherState state = WithPriorities({0, 0});
  ASSERT_TRUE(Applies(state, ScheduleClosure(3, 7, "echo", "", 0, {}, 3)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(4, 7, "noop", "", 0, {}, 1)));
  AssignmentPlan plan = PlanAssignments(state, {Live(1, 3)}, 0, 0, kStamp);
  EXPECT_EQ(RunIds(plan.runs), (std::vector<uint64_t>{3, 4, 1}));
}

TEST(ClosurePriority, APutBackClosureKeepsItsPriorityBehindItsEquals) {
  DispatcherState state = WithPriorities({2, 0});
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(3, 7, "noop", "", 0, {}, 2)));
  ASSERT_TRUE(Applies(state, PutBackClosure(1, 1, 1)));
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::QUEUED)), (std::vector<uint64_t>{3, 1, 2}));
  EXPECT_EQ(state.FindClosure(1)->priority, 2);
  ASSERT_TRUE(state.CheckIndexes().ok());
}

TEST(ClosurePriority, ASnapshotKeepsTheQueueOrder) {
  DispatcherState state = WithPriorities({-3, 4, 0, 4, 7});
  capnp::MallocMessageBuilder message;
  state.WriteSnapshot(message.initRoot<journal::StateSnapshot>());
  Result<DispatcherState> restored =
      DispatcherState::FromSnapshot(message.getRoot<journal::StateSnapshot>().asReader());
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(Ids(restored->ClosuresInState(ClosureState::QUEUED)),
            (std::vector<uint64_t>{5, 2, 4, 3, 1}));
  EXPECT_EQ(restored->Digest(), state.Digest());
  EXPECT_EQ(RunIds(PlanAssignments(*restored, {Live(1, 2)}, 0, 0, kStamp).runs),
            (std::vector<uint64_t>{5, 2}));
}

TEST(ClosureTimeout, PlanScheduleSetsTheDeadlineFromTheStampAndKeepsThePriority) {
  DispatcherState state;
  std::vector<NewClosure> closures(2);
  closures[0].function = "noop";
  closures[0].priority = -4;
  closures[0].timeout_ms = 250;
  closures[1].function = "noop";
  Result<SchedulePlan> plan = PlanSchedule(state, 7, closures, kStamp);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(AppliesAll(state, plan->updates));
  const Closure* timed = state.FindClosure(plan->ids[0]);
  EXPECT_EQ(timed->priority, -4);
  EXPECT_EQ(timed->deadline_micros, kStamp.time_micros + 250'000);
  EXPECT_EQ(state.FindClosure(plan->ids[1])->deadline_micros, 0);
  EXPECT_EQ(state.EarliestClosureDeadline(), kStamp.time_micros + 250'000);
}

// Worker 1 runs closure 1; closures 2 and 3 are queued; 4 finished; 5 of coordinator 8.
DispatcherState Mixed() {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterWorker(1, "a")));
  for (uint64_t id = 1; id <= 4; ++id) EXPECT_TRUE(Applies(state, ScheduleClosure(id, 7)));
  EXPECT_TRUE(Applies(state, ScheduleClosure(5, 8)));
  EXPECT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  EXPECT_TRUE(Applies(state, AssignClosure(4, 1, 1)));
  EXPECT_TRUE(Applies(state, FinishClosure(4, 1, 1, "done")));
  return state;
}

TEST(ClosureCancel, CancelsQueuedAndRunningLeavesDoneOnesAndIsNoFirstError) {
  DispatcherState state = Mixed();
  Result<CancelPlan> plan = PlanCancel(state, 7, {2, 1, 4, 2}, {}, kStamp);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->states,
            (std::vector<ClosureState>{ClosureState::CANCELLED, ClosureState::CANCELLED,
                                       ClosureState::FINISHED, ClosureState::CANCELLED}));
  EXPECT_EQ(plan->ending.num_ended, 2u);
  EXPECT_EQ(plan->ending.running, (std::map<uint64_t, std::vector<uint64_t>>{{1, {1}}}));
  ASSERT_TRUE(AppliesAll(state, plan->ending.updates));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::CANCELLED);
  EXPECT_EQ(state.FindClosure(2)->state, ClosureState::CANCELLED);
  EXPECT_EQ(state.FindClosure(3)->state, ClosureState::QUEUED);  // not asked: untouched
  EXPECT_EQ(state.FindClosure(4)->state, ClosureState::FINISHED);
  EXPECT_EQ(state.NumClosuresOnWorker(1), 0u);
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);
  // Again: idempotent, nothing to do.
  Result<CancelPlan> again = PlanCancel(state, 7, {1, 2}, {}, kStamp);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->ending.updates.empty());
  EXPECT_EQ(again->states,
            (std::vector<ClosureState>{ClosureState::CANCELLED, ClosureState::CANCELLED}));
}

TEST(ClosureCancel, AnUnknownIdIsNotFoundNamingItAndCancelsNothing) {
  DispatcherState state = Mixed();
  for (uint64_t bad : {uint64_t{99}, uint64_t{5}}) {  // never scheduled; another coordinator's
    Result<CancelPlan> plan = PlanCancel(state, 7, {2, bad}, {}, kStamp);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kNotFound);
    EXPECT_NE(plan.status().message().find("closure " + std::to_string(bad)), std::string::npos)
        << plan.status().message();
  }
  // Released, its release not journaled yet: gone too.
  EXPECT_EQ(PlanCancel(state, 7, {4}, {4}, kStamp).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(state.FindClosure(2)->state, ClosureState::QUEUED);
}

TEST(ClosureCancel, ACoordinatorsCancelEndsEveryClosureNotDoneWaitingOnesToo) {
  DispatcherState state = Mixed();
  ASSERT_TRUE(Applies(state, ScheduleClosureAfter(6, 7, "noop", "", 0, {}, {3})));  // waits for 3
  Result<EndingPlan> plan = PlanCancelCoordinator(state, 7, kStamp);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->num_ended, 4u);  // 1 running, 2 and 3 queued, 6 waiting
  EXPECT_EQ(plan->running, (std::map<uint64_t, std::vector<uint64_t>>{{1, {1}}}));
  ASSERT_TRUE(AppliesAll(state, plan->updates));
  for (uint64_t id : {1, 2, 3, 6}) EXPECT_EQ(state.FindClosure(id)->state, ClosureState::CANCELLED);
  EXPECT_EQ(state.FindClosure(4)->state, ClosureState::FINISHED);  // done: kept
  EXPECT_EQ(state.FindClosure(5)->state, ClosureState::QUEUED);    // coordinator 8's
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);
  EXPECT_EQ(state.NumUnfinishedClosures(7), 0u);
  // Again: nothing left to cancel.
  Result<EndingPlan> again = PlanCancelCoordinator(state, 7, kStamp);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->num_ended, 0u);
  EXPECT_TRUE(again->updates.empty());
}

TEST(ClosureCancel, ACoordinatorsCancelRefusesNoCoordinatorAndOneWithoutClosures) {
  DispatcherState state = Mixed();
  const uint64_t digest = state.Digest();
  EXPECT_EQ(PlanCancelCoordinator(state, 0, kStamp).status().code(), StatusCode::kInvalidArgument);
  Result<EndingPlan> unknown = PlanCancelCoordinator(state, 9, kStamp);
  ASSERT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("coordinator 9"), std::string::npos)
      << unknown.status().message();
  EXPECT_EQ(state.Digest(), digest);
}

TEST(ClosureTimeout, ClosuresPastTheirDeadlineFailAsDeadlineExceededNotAsFirstError) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  // Scheduled at time 0 (the builders' updates carry none): timeouts 2 ms and 5 ms.
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "noop", "", 0, {}, 0, 2000)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(2, 7, "noop", "", 0, {}, 0, 5000)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(3, 7, "noop", "", 0, {}, 0, 0)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(4, 7, "noop", "", 0, {}, 0, 3000)));
  ASSERT_TRUE(Applies(state, AssignClosure(4, 1, 1)));
  EXPECT_EQ(state.EarliestClosureDeadline(), 2000);

  EXPECT_TRUE(PlanDeadlines(state, Stamp{1999, 16u << 20}).updates.empty());
  EndingPlan plan = PlanDeadlines(state, Stamp{3000, 16u << 20});
  EXPECT_EQ(plan.num_ended, 2u);
  EXPECT_EQ(plan.running, (std::map<uint64_t, std::vector<uint64_t>>{{1, {4}}}));
  ASSERT_EQ(plan.updates.size(), 2u);
  EXPECT_TRUE(plan.updates[0].getClosureFailed().getDeadlineExceeded());
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  for (uint64_t id : {1, 4}) {
    const Closure* c = state.FindClosure(id);
    EXPECT_EQ(c->state, ClosureState::FAILED);
    EXPECT_NE(c->error.find("deadline exceeded"), std::string::npos) << c->error;
    EXPECT_FALSE(c->user_error);
    EXPECT_NE(c->deadline_micros, 0);  // kept: it says why it failed
  }
  EXPECT_NE(state.FindClosure(1)->error.find("timeout of 2 ms"), std::string::npos);
  EXPECT_NE(state.FindClosure(4)->error.find("running"), std::string::npos);
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);
  EXPECT_EQ(state.FindClosure(3)->state, ClosureState::QUEUED);  // no deadline: untouched
  EXPECT_EQ(state.EarliestClosureDeadline(), 5000);
  // Ending otherwise forgets the deadline.
  ASSERT_TRUE(Applies(state, CancelClosure(2)));
  EXPECT_EQ(state.FindClosure(2)->deadline_micros, 0);
  EXPECT_EQ(state.EarliestClosureDeadline(), 0);
  EXPECT_TRUE(state.CheckIndexes().ok());
}

TEST(ClosureTimeout, ADeadlineFailureNeedsADeadlineAndNoWorker) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(2, 7, "noop", "", 0, {}, 0, 2000)));
  ASSERT_TRUE(Applies(state, AssignClosure(2, 1, 1)));
  EXPECT_FALSE(state.Apply(FailClosure(1, 0, 0, "late", false, false, true).reader()).ok());
  EXPECT_FALSE(state.Apply(FailClosure(2, 1, 1, "late", false, false, true).reader()).ok());
  EXPECT_TRUE(state.Apply(FailClosure(2, 0, 1, "late", false, false, true).reader()).ok());
}

// Repeats within one request are found by sorting the ids, not a set: a
// repeated request id is refused naming it, a closure asked for twice is
// released once, and one whose release is pending is not released again.
TEST(ClosureRequests, RepeatedRequestIdsAreRefusedAndARepeatedReleaseReleasesOnce) {
  DispatcherState state = WithPriorities({0, 0, 0});
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(Applies(state, AssignClosure(id, 1, 1)));
    ASSERT_TRUE(Applies(state, FinishClosure(id, 1, 1, "r")));
  }
  const auto text = capnp::Text::Reader("noop");
  std::vector<NewClosure> closures(3);
  for (NewClosure& c : closures) c.function = text;
  closures[0].request_id = 9;
  closures[1].request_id = 5;
  closures[2].request_id = 9;
  Result<SchedulePlan> repeated = PlanSchedule(state, 7, closures, kStamp);
  ASSERT_FALSE(repeated.ok());
  EXPECT_EQ(repeated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(repeated.status().message().find("repeats request id 9"), std::string::npos)
      << repeated.status().ToString();
  closures[2].request_id = 4;
  EXPECT_TRUE(PlanSchedule(state, 7, closures, kStamp).ok());

  Result<std::vector<uint64_t>> release = PlanRelease(state, 7, {3, 1, 3, 1, 2}, {});
  ASSERT_TRUE(release.ok()) << release.status().ToString();
  EXPECT_EQ(*release, (std::vector<uint64_t>{3, 1, 2}));
  release = PlanRelease(state, 7, {1, 2, 2}, {1});
  ASSERT_TRUE(release.ok()) << release.status().ToString();
  EXPECT_EQ(*release, (std::vector<uint64_t>{2}));
}

}  // namespace
}  // namespace dispatch::state
