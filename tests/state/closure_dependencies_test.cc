// Closure dependencies (ClosureScheduled.inputs) in the pure state and its
// planners: a closure waits until its inputs are finished, is queued when the
// last one finishes, fails (transitively, naming the input) when one fails or
// is cancelled; inputs must be earlier closures of the same coordinator; an
// input is not released while a dependant is not done; a snapshot keeps it all.

#include <gtest/gtest.h>

#include <set>

#include "state/closure_endings.h"
#include "state/closure_planner.h"
#include "state/closure_requests.h"
#include "state/dispatcher_state.h"
#include "tests/state/planner_test_support.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

ClosureState StateOf(const DispatcherState& state, uint64_t id) {
  return state.FindClosure(id)->state;
}

TEST(ClosureDependencies, AClosureWaitsForItsInputsAndIsQueuedWhenTheLastFinishes) {
  DispatcherState state = DependencyChain();
  EXPECT_EQ(StateOf(state, 1), ClosureState::QUEUED);
  EXPECT_EQ(StateOf(state, 2), ClosureState::WAITING);
  EXPECT_EQ(StateOf(state, 3), ClosureState::WAITING);
  EXPECT_EQ(state.NumClosuresInState(ClosureState::QUEUED), 1u);
  EXPECT_EQ(state.NumClosuresInState(ClosureState::WAITING), 2u);
  EXPECT_EQ(state.NumUnfinishedClosures(7), 3u);  // join waits for waiting closures
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, FinishClosure(1, 1, 1, "1")));
  EXPECT_EQ(StateOf(state, 2), ClosureState::QUEUED);
  EXPECT_EQ(StateOf(state, 3), ClosureState::WAITING);
  EXPECT_TRUE(state.CheckIndexes().ok()) << state.CheckIndexes().ToString();

  // Two inputs: queued only once both are finished.
  ASSERT_TRUE(Applies(state, ScheduleClosure(4, 7, "sum")));
  ASSERT_TRUE(Applies(state, ScheduleClosureAfter(5, 7, "sum", "", 0, {}, {1, 4})));
  EXPECT_EQ(StateOf(state, 5), ClosureState::WAITING);
  ASSERT_TRUE(Applies(state, AssignClosure(4, 1, 1)));
  ASSERT_TRUE(Applies(state, FinishClosure(4, 1, 1, "4")));
  EXPECT_EQ(StateOf(state, 5), ClosureState::QUEUED);

  // Inputs finished already: queued at once.
  ASSERT_TRUE(Applies(state, ScheduleClosureAfter(6, 7, "sum", "", 0, {}, {1, 4})));
  EXPECT_EQ(StateOf(state, 6), ClosureState::QUEUED);
  EXPECT_TRUE(state.CheckIndexes().ok()) << state.CheckIndexes().ToString();
}

TEST(ClosureDependencies, WaitingClosuresAreNotRunnable) {
  DispatcherState state = DependencyChain();
  LiveWorker worker;
  worker.worker_id = 1;
  worker.slots = 8;
  worker.functions = std::make_shared<const FunctionSet>(FunctionSet{"sum"});
  AssignmentPlan plan = PlanAssignments(state, {worker}, 0, 0, kStamp);
  ASSERT_EQ(plan.runs.size(), 1u);
  EXPECT_EQ(plan.runs[0].closure_id, 1u);
  EXPECT_EQ(CountUnrunnable(state, {}), 1u);  // only the queued one counts
}

TEST(ClosureDependencies, AFailedInputFailsItsDependantsTransitivelyNamingIt) {
  DispatcherState state = DependencyChain();
  ASSERT_TRUE(Applies(state, ScheduleClosure(4, 7)));  // independent
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  UpdateList plan = PlanUserError(state, {1, 1, 1}, "boom", kStamp);
  ASSERT_TRUE(AppliesAll(state, plan));
  const Closure* two = state.FindClosure(2);
  const Closure* three = state.FindClosure(3);
  EXPECT_EQ(two->state, ClosureState::FAILED);
  EXPECT_EQ(two->error, "input closure 1 failed: boom");
  EXPECT_FALSE(two->user_error);
  EXPECT_EQ(three->state, ClosureState::FAILED);
  EXPECT_EQ(three->error, "input closure 2 failed: input closure 1 failed: boom");
  // The input's own failure is the first error; the dependants' are not.
  ASSERT_NE(state.FindCoordinatorError(7), nullptr);
  EXPECT_EQ(state.FindCoordinatorError(7)->closure_id, 1u);
  EXPECT_EQ(StateOf(state, 4), ClosureState::CANCELLED);  // cancel on first error, as before
  EXPECT_EQ(state.NumUnfinishedClosures(7), 0u);
  EXPECT_TRUE(state.CheckIndexes().ok()) << state.CheckIndexes().ToString();
}

TEST(ClosureDependencies, TheDependantsOfACancelledInputFailAndAreNoFirstError) {
  DispatcherState state = DependencyChain();
  const std::vector<uint64_t> moved = state.WaitingDependants({1});
  EXPECT_EQ(moved, (std::vector<uint64_t>{2, 3}));
  ASSERT_TRUE(Applies(state, CancelClosure(1)));
  EXPECT_EQ(StateOf(state, 2), ClosureState::FAILED);
  EXPECT_EQ(state.FindClosure(2)->error, "input closure 1 was cancelled");
  EXPECT_EQ(StateOf(state, 3), ClosureState::FAILED);
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);
  EXPECT_TRUE(state.CheckIndexes().ok()) << state.CheckIndexes().ToString();
}

TEST(ClosureDependencies, ACancelBatchNamingAnInputAndItsDependantApplies) {
  DispatcherState state = DependencyChain();
  ASSERT_TRUE(Applies(state, CancelClosures({1, 2})));
  // Each item is cancelled, as PlanCancel told the caller, even one listed
  // after its input (found by the simulation: it used to fail with it);
  // a dependant not in the batch fails with its input.
  EXPECT_EQ(StateOf(state, 1), ClosureState::CANCELLED);
  EXPECT_EQ(StateOf(state, 2), ClosureState::CANCELLED);
  EXPECT_EQ(StateOf(state, 3), ClosureState::FAILED);
  EXPECT_EQ(state.FindClosure(3)->error, "input closure 2 was cancelled");
  EXPECT_TRUE(state.CheckIndexes().ok()) << state.CheckIndexes().ToString();
}

// Found by the simulation: a deadline failure left its dependants waiting
// for ever.
TEST(ClosureDependencies, TheDependantsOfAnInputPastItsDeadlineFail) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "sum", "", 0, {}, 0, 2000)));
  ASSERT_TRUE(Applies(state, ScheduleClosureAfter(2, 7, "sum", "", 0, {}, {1})));
  ASSERT_TRUE(AppliesAll(state, PlanDeadlines(state, Stamp{3000, 16u << 20}).updates));
  EXPECT_EQ(StateOf(state, 1), ClosureState::FAILED);
  EXPECT_EQ(StateOf(state, 2), ClosureState::FAILED);
  EXPECT_NE(state.FindClosure(2)->error.find("input closure 1"), std::string::npos)
      << state.FindClosure(2)->error;
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);  // a timeout is no first error
  EXPECT_TRUE(state.CheckIndexes().ok()) << state.CheckIndexes().ToString();
}

// Found by the simulation (seed 296): an input and its dependant past their
// deadlines at once; the input's failure failed the dependant before the
// dependant's own deadline update, which was then refused.
TEST(ClosureDependencies, AnInputAndItsDependantPastTheirDeadlinesBothFailAsDeadlineExceeded) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "sum", "", 0, {}, 0, 2000)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(2, 7, "sum", "", 0, {}, 0, 2500, {1})));
  ASSERT_EQ(StateOf(state, 2), ClosureState::WAITING);
  EndingPlan plan = PlanDeadlines(state, Stamp{3000, 16u << 20});
  EXPECT_EQ(plan.num_ended, 2u);
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  for (uint64_t id : {1, 2}) {
    EXPECT_EQ(StateOf(state, id), ClosureState::FAILED);
    EXPECT_NE(state.FindClosure(id)->error.find("deadline exceeded"), std::string::npos)
        << state.FindClosure(id)->error;
  }
}

TEST(ClosureDependencies, ADependantOfAFailedInputFailsWhenScheduled) {
  DispatcherState state = DependencyChain();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, FailClosure(1, 1, 1, "boom", /*user_error=*/false,
                                         /*infrastructure=*/true)));
  ASSERT_TRUE(Applies(state, ScheduleClosureAfter(4, 7, "sum", "", 0, {}, {1})));
  EXPECT_EQ(StateOf(state, 4), ClosureState::FAILED);
  EXPECT_EQ(state.FindClosure(4)->error, "input closure 1 failed: boom");
  EXPECT_TRUE(state.CheckIndexes().ok()) << state.CheckIndexes().ToString();
}

TEST(ClosureDependencies, InputsFinishingWhileAFirstErrorIsPendingCancelTheDependant) {
  DispatcherState state = DependencyChain();
  ASSERT_TRUE(Applies(state, ScheduleClosure(4, 7)));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, AssignClosure(4, 1, 1)));
  ASSERT_TRUE(Applies(state, FailClosure(4, 1, 1, "boom")));  // the first error
  ASSERT_TRUE(Applies(state, FinishClosure(1, 1, 1, "1")));
  EXPECT_EQ(StateOf(state, 2), ClosureState::CANCELLED);
  EXPECT_EQ(StateOf(state, 3), ClosureState::FAILED);
  EXPECT_EQ(state.FindClosure(3)->error, "input closure 2 was cancelled");
  EXPECT_TRUE(state.CheckIndexes().ok()) << state.CheckIndexes().ToString();
}

TEST(ClosureDependencies, AFailureChainKeepsItsErrorBounded) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7)));
  for (uint64_t id = 2; id <= 200; ++id)
    ASSERT_TRUE(Applies(state, ScheduleClosureAfter(id, 7, "noop", "", 0, {}, {id - 1})));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, FailClosure(1, 1, 1, "root cause")));
  const std::string& last = state.FindClosure(200)->error;
  EXPECT_LE(last.size(), 1024u);
  EXPECT_EQ(last.rfind("input closure 199 failed: ", 0), 0u) << last;
  EXPECT_NE(last.find("input closure 1 failed: root cause"), std::string::npos) << last;
  EXPECT_EQ(state.NumClosuresInState(ClosureState::FAILED), 200u);
}

TEST(ClosureDependencies, InputsMustBeEarlierClosuresOfTheSameCoordinator) {
  DispatcherState state = DependencyChain();
  // Unknown, another coordinator's, or not older.
  EXPECT_FALSE(Applies(state, ScheduleClosureAfter(4, 7, "sum", "", 0, {}, {99})));
  EXPECT_FALSE(Applies(state, ScheduleClosureAfter(4, 8, "sum", "", 0, {}, {1})));
  EXPECT_FALSE(Applies(state, ScheduleClosureAfter(4, 7, "sum", "", 0, {}, {4})));
  // An earlier item of the same batch is fine; a later one is not.
  EXPECT_TRUE(Applies(state, ScheduleClosures({4, 5}, 7, {}, {{}, {4}})));
  EXPECT_EQ(StateOf(state, 5), ClosureState::WAITING);
  EXPECT_FALSE(Applies(state, ScheduleClosures({6, 7}, 7, {}, {{7}, {}})));
  EXPECT_FALSE(Applies(state, ScheduleClosures({6, 7}, 8, {}, {{}, {6, 1}})));
}

TEST(ClosureDependencies, AnInputIsNotReleasedWhileADependantIsNotDone) {
  DispatcherState state = DependencyChain();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, FinishClosure(1, 1, 1, "1")));
  EXPECT_TRUE(state.IsNeededAsInput(1));
  const uint64_t digest = state.Digest();
  EXPECT_FALSE(Applies(state, ReleaseClosure(1)));
  EXPECT_EQ(state.Digest(), digest);
  ASSERT_TRUE(Applies(state, AssignClosure(2, 1, 1)));
  ASSERT_TRUE(Applies(state, FinishClosure(2, 1, 1, "2")));
  EXPECT_FALSE(state.IsNeededAsInput(1));
  EXPECT_TRUE(Applies(state, ReleaseClosure(1)));
  EXPECT_EQ(StateOf(state, 3), ClosureState::QUEUED);  // its input 2 is still there
}

TEST(ClosureDependencies, AFlushHoldsAnInputUntilItsDependantsAreDone) {
  DispatcherState state = DependencyChain();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, FinishClosureStored(1, 1, 1, 5, 77)));
  ReleaseFlushPlan plan = PlanReleaseFlush(state, {1}, kStamp);
  EXPECT_EQ(plan.release, IdList{});
  EXPECT_EQ(plan.held, IdList{1});
  EXPECT_TRUE(plan.updates.empty());

  ASSERT_TRUE(Applies(state, AssignClosure(2, 1, 1)));
  ASSERT_TRUE(Applies(state, FinishClosure(2, 1, 1, "2")));
  plan = PlanReleaseFlush(state, {1, 2, 9}, kStamp);  // 9: gone (released before), dropped
  EXPECT_EQ(plan.release, IdList{1});
  EXPECT_EQ(plan.stored, IdList{1});  // its result row goes with the release
  EXPECT_EQ(plan.held, IdList{2});    // 3 is not done
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  EXPECT_EQ(state.FindClosure(1), nullptr);
  EXPECT_NE(state.FindClosure(2), nullptr);
}

TEST(ClosureDependencies, PlanScheduleResolvesInCallInputsAndRefusesUnknownOnesNamingThem) {
  DispatcherState state = DependencyChain();
  capnp::MallocMessageBuilder message;
  auto text = capnp::Text::Reader("sum");
  std::vector<NewClosure> closures(3);
  for (NewClosure& c : closures) c.function = text;
  closures[1].inputs = {kInputInCall + 0, 1};
  closures[2].inputs = {kInputInCall + 1};
  Result<SchedulePlan> plan = PlanSchedule(state, 7, closures, kStamp);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->ids, (std::vector<uint64_t>{4, 5, 6}));
  ASSERT_TRUE(AppliesAll(state, plan->updates));
  EXPECT_EQ(state.FindClosure(5)->inputs, (std::vector<uint64_t>{4, 1}));
  EXPECT_EQ(state.FindClosure(6)->inputs, (std::vector<uint64_t>{5}));
  EXPECT_EQ(StateOf(state, 6), ClosureState::WAITING);

  closures[2].inputs = {kInputInCall + 2};  // itself: not earlier
  EXPECT_EQ(PlanSchedule(state, 7, closures, kStamp).status().code(),
            StatusCode::kInvalidArgument);
  closures[2].inputs = {42};
  Result<SchedulePlan> unknown = PlanSchedule(state, 7, closures, kStamp);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("input closure 42"), std::string::npos);
  closures[2].inputs = {1};
  EXPECT_EQ(PlanSchedule(state, 8, closures, kStamp).status().code(), StatusCode::kNotFound);
  // Released (a release pending in the reactor counts).
  EXPECT_EQ(PlanSchedule(state, 7, closures, kStamp, {1}).status().code(), StatusCode::kNotFound);
}

TEST(ClosureDependencies, ASnapshotKeepsWaitingClosuresAndTheirInputs) {
  DispatcherState state = DependencyChain();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  capnp::MallocMessageBuilder message;
  state.WriteSnapshot(message.initRoot<journal::StateSnapshot>());
  Result<DispatcherState> restored =
      DispatcherState::FromSnapshot(message.getRoot<journal::StateSnapshot>().asReader());
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->Digest(), state.Digest());
  EXPECT_EQ(StateOf(*restored, 3), ClosureState::WAITING);
  EXPECT_TRUE(restored->IsNeededAsInput(2));
  // Replayed on from there, the chain continues.
  ASSERT_TRUE(Applies(*restored, FinishClosure(1, 1, 1, "1")));
  EXPECT_EQ(StateOf(*restored, 2), ClosureState::QUEUED);
}

}  // namespace
}  // namespace dispatch::state
