// The closure transitions: scheduled, assigned, finished, failed, cancelled,
// put back, released, and the coordinator's first error.

#include <algorithm>

#include <capnp/schema.h>
#include <gtest/gtest.h>

#include "state/bytes.h"
#include "state/closure_requests.h"
#include "state/dispatcher_state.h"
#include "tests/state/planner_test_support.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

// Workers 1 and 2; closures 1..3 of coordinator 7 queued in order.
DispatcherState ThreeQueued() {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterWorker(1, "a")));
  EXPECT_TRUE(Applies(state, RegisterWorker(2, "b")));
  for (uint64_t id = 1; id <= 3; ++id)
    EXPECT_TRUE(Applies(state, ScheduleClosure(id, 7, "echo", "arg")));
  return state;
}

TEST(DispatcherState, SchedulingClosuresQueuesThemInOrder) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, ScheduleClosure(5, 7, "echo", std::string("a\0b", 3)).At(11)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(6, 8)));
  const Closure* closure = state.FindClosure(5);
  ASSERT_NE(closure, nullptr);
  EXPECT_EQ(closure->coordinator_id, 7u);
  EXPECT_EQ(closure->function_name, "echo");
  EXPECT_EQ(closure->args, std::string("a\0b", 3));
  EXPECT_EQ(closure->state, ClosureState::QUEUED);
  EXPECT_EQ(closure->attempts, 0u);
  EXPECT_EQ(closure->scheduled_micros, 11);
  EXPECT_EQ(state.NextQueuedClosure(), closure);
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::QUEUED)), (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(Ids(state.ClosuresForCoordinator(7)), (std::vector<uint64_t>{5}));
  EXPECT_EQ(state.NumUnfinishedClosures(7), 1u);
  EXPECT_EQ(state.NextClosureId(), 7u);
}

TEST(DispatcherState, SchedulingClosureTwiceForOneRequestIsRefusedUntilReleased) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "echo", "x", 42)));
  EXPECT_EQ(state.FindClosureByRequest(7, 42)->id, 1u);
  EXPECT_EQ(state.FindClosureByRequest(8, 42), nullptr);
  EXPECT_TRUE(Rejects(state, ScheduleClosure(2, 7, "echo", "x", 42), StatusCode::kAlreadyExists,
                      "coordinator 7 request 42 already scheduled closure 1"));
  ASSERT_TRUE(Applies(state, ScheduleClosure(2, 8, "echo", "x", 42)));  // another coordinator
  ASSERT_TRUE(Applies(state, ScheduleClosure(3, 7, "echo", "x", 0)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(4, 7, "echo", "x", 0)));  // 0 is no request id
  ASSERT_TRUE(Applies(state, CancelClosure(1)));
  ASSERT_TRUE(Applies(state, ReleaseClosure(1)));
  EXPECT_EQ(state.FindClosureByRequest(7, 42), nullptr);
  EXPECT_TRUE(Applies(state, ScheduleClosure(5, 7, "echo", "x", 42)));
}

TEST(DispatcherState, SchedulingClosureRejectsBadIdsAndMissingFunction) {
  DispatcherState state;
  EXPECT_TRUE(Rejects(state, ScheduleClosure(0, 1), StatusCode::kInvalidArgument, "closure id 0"));
  EXPECT_TRUE(Rejects(state, ScheduleClosure(1, 1, ""), StatusCode::kInvalidArgument,
                      "closure 1 has no function name"));
  ASSERT_TRUE(Applies(state, ScheduleClosure(2, 1)));
  EXPECT_TRUE(Rejects(state, ScheduleClosure(2, 1), StatusCode::kAlreadyExists,
                      "closure 2 already exists"));
  EXPECT_TRUE(
      Rejects(state, ScheduleClosure(1, 1), StatusCode::kInvalidArgument, "closure 1 reuses"));
}

TEST(DispatcherState, AssigningClosureTakesItOffTheQueue) {
  DispatcherState state = ThreeQueued();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 2, 1)));
  const Closure* closure = state.FindClosure(1);
  EXPECT_EQ(closure->state, ClosureState::ASSIGNED);
  EXPECT_EQ(closure->worker_id, 2u);
  EXPECT_EQ(closure->attempts, 1u);
  EXPECT_EQ(state.NextQueuedClosure()->id, 2u);
  EXPECT_EQ(Ids(state.ClosuresOnWorker(2)), (std::vector<uint64_t>{1}));
  EXPECT_EQ(state.NumClosuresInState(ClosureState::QUEUED), 2u);
  EXPECT_EQ(state.NumUnfinishedClosures(7), 3u);
}

// The per-worker, per-coordinator and per-state sets are hashed; every walk
// of them must still come out by id, whatever order the ids went in.
TEST(DispatcherState, ClosureListingsComeOutByIdWhateverTheOrderOfTheirUpdates) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "b")));
  std::vector<uint64_t> all, on_a, finished;
  for (uint64_t id = 1; id <= 60; ++id) {
    ASSERT_TRUE(Applies(state, ScheduleClosure(id, 7, "echo", "arg")));
    all.push_back(id);
  }
  // Assigned ascending on both workers, then some finished in a shuffled order.
  for (uint64_t id = 1; id <= 60; ++id) {
    const uint64_t worker = id % 3 == 0 ? 2 : 1;
    ASSERT_TRUE(Applies(state, AssignClosure(id, worker, 1)));
    if (worker == 1) on_a.push_back(id);
  }
  for (uint64_t k = 0; k < 60; k += 4) {
    const uint64_t id = (k * 37) % 60 + 1;
    ASSERT_TRUE(Applies(state, FinishClosure(id, id % 3 == 0 ? 2 : 1, 1, "r")));
    finished.push_back(id);
  }
  std::sort(finished.begin(), finished.end());
  std::vector<uint64_t> still_on_a, assigned, unfinished;
  for (uint64_t id : on_a)
    if (!std::binary_search(finished.begin(), finished.end(), id)) still_on_a.push_back(id);
  for (uint64_t id : all)
    if (!std::binary_search(finished.begin(), finished.end(), id)) assigned.push_back(id);
  unfinished = assigned;

  EXPECT_EQ(Ids(state.ClosuresOnWorker(1)), still_on_a);
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::ASSIGNED)), assigned);
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::ASSIGNED, 5)),
            std::vector<uint64_t>(assigned.begin(), assigned.begin() + 5));
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::FINISHED)), finished);
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::FINISHED, 3)),
            std::vector<uint64_t>(finished.begin(), finished.begin() + 3));
  EXPECT_EQ(Ids(state.ClosuresForCoordinator(7)), all);
  EXPECT_EQ(Ids(state.UnfinishedClosures(7)), unfinished);
  EXPECT_EQ(state.NumClosuresInState(ClosureState::ASSIGNED), assigned.size());
  EXPECT_EQ(state.NumClosuresInState(ClosureState::FINISHED), finished.size());
  EXPECT_TRUE(state.CheckIndexes().ok());
}

// Per-state tallies are arrays of kClosureStateCount slots.
TEST(DispatcherState, EveryClosureStateOfTheSchemaHasATallySlot) {
  auto enumerants = capnp::Schema::from<ClosureState>().getEnumerants();
  EXPECT_EQ(enumerants.size(), kClosureStateCount);
  for (auto enumerant : enumerants)
    EXPECT_LT(ClosureStateSlot(static_cast<ClosureState>(enumerant.getOrdinal())), kClosureStateCount);
}

TEST(DispatcherState, AssigningClosureRejectsUnknownClosureOrWorkerWrongStateAndWrongAttempt) {
  DispatcherState state = ThreeQueued();
  EXPECT_TRUE(
      Rejects(state, AssignClosure(9, 1, 1), StatusCode::kNotFound, "closure 9 is unknown"));
  EXPECT_TRUE(Rejects(state, AssignClosure(1, 5, 1), StatusCode::kNotFound,
                      "closure 1 is assigned to unknown worker 5"));
  EXPECT_TRUE(Rejects(state, AssignClosure(1, 1, 2), StatusCode::kFailedPrecondition,
                      "the next is 1, not 2"));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  EXPECT_TRUE(Rejects(state, AssignClosure(1, 2, 2), StatusCode::kFailedPrecondition,
                      "closure 1 is assigned, not queued"));
}

TEST(DispatcherState, FinishingClosureHoldsItsResult) {
  DispatcherState state = ThreeQueued();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, FinishClosure(1, 1, 1, "result").At(99)));
  const Closure* closure = state.FindClosure(1);
  EXPECT_EQ(closure->state, ClosureState::FINISHED);
  EXPECT_EQ(closure->result, "result");
  EXPECT_EQ(closure->done_micros, 99);
  EXPECT_TRUE(state.ClosuresOnWorker(1).empty());
  EXPECT_EQ(state.NumUnfinishedClosures(7), 2u);
}

TEST(DispatcherState, FinishingClosureWithStoredResultHoldsOnlyItsSizeAndChecksum) {
  DispatcherState state = ThreeQueued();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, FinishClosureStored(1, 1, 1, 262144, 0xDEADBEEF)));
  const Closure* closure = state.FindClosure(1);
  EXPECT_EQ(closure->state, ClosureState::FINISHED);
  EXPECT_TRUE(closure->result_stored);
  EXPECT_EQ(closure->result_size, 262144u);
  EXPECT_EQ(closure->result_crc, 0xDEADBEEFu);
  EXPECT_TRUE(closure->result.empty());
}

TEST(DispatcherState, DoneClosuresDropTheirArgsButQueuedAndRunningOnesKeepThem) {
  DispatcherState state = ThreeQueued();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, AssignClosure(2, 2, 1)));
  EXPECT_EQ(state.FindClosure(1)->args, "arg");  // running: a retry needs them
  ASSERT_TRUE(Applies(state, FinishClosureStored(1, 1, 1, 5, 9)));
  ASSERT_TRUE(Applies(state, FailClosure(2, 2, 1, "boom")));
  ASSERT_TRUE(Applies(state, CancelClosure(3)));
  for (uint64_t id = 1; id <= 3; ++id) EXPECT_TRUE(state.FindClosure(id)->args.empty()) << id;
}

TEST(DispatcherState, StoredResultWithInlineBytesIsRejected) {
  DispatcherState state = ThreeQueued();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  OwnedUpdate both = FinishClosureStored(1, 1, 1, 3, 7);
  both.builder().getClosureBatch().getFinished()[0].setResult(AsData("abc"));
  EXPECT_TRUE(Rejects(state, both, StatusCode::kInvalidArgument,
                      "closure 1 has a stored result and inline result bytes too"));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::ASSIGNED);
}

TEST(DispatcherState, FinishingClosureRejectsReportsFromAnotherWorkerOrAttempt) {
  DispatcherState state = ThreeQueued();
  EXPECT_TRUE(Rejects(state, FinishClosure(1, 1, 1, "r"), StatusCode::kFailedPrecondition,
                      "closure 1 is queued, not assigned"));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, PutBackClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 2, 2)));
  // A late result of the first attempt is refused: exactly one result counts.
  EXPECT_TRUE(Rejects(state, FinishClosure(1, 1, 1, "stale"), StatusCode::kFailedPrecondition,
                      "closure 1 runs as attempt 2 on worker 2, not as attempt 1 on worker 1"));
  ASSERT_TRUE(Applies(state, FinishClosure(1, 2, 2, "fresh")));
  EXPECT_TRUE(Rejects(state, FinishClosure(1, 2, 2, "again"), StatusCode::kFailedPrecondition,
                      "closure 1 is finished, not assigned"));
  EXPECT_EQ(state.FindClosure(1)->result, "fresh");
}

TEST(DispatcherState, PuttingClosureBackQueuesItAtTheBack) {
  DispatcherState state = ThreeQueued();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, PutBackClosure(1, 1, 1)));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::QUEUED);
  EXPECT_EQ(state.FindClosure(1)->attempts, 1u);
  EXPECT_EQ(state.FindClosure(1)->worker_id, 0u);
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::QUEUED)), (std::vector<uint64_t>{2, 3, 1}));
  EXPECT_TRUE(Rejects(state, PutBackClosure(1, 1, 1), StatusCode::kFailedPrecondition,
                      "closure 1 is queued"));
}

TEST(DispatcherState, FailingClosureSetsTheCoordinatorsFirstErrorOnce) {
  DispatcherState state = ThreeQueued();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, AssignClosure(2, 2, 1)));
  ASSERT_TRUE(Applies(state, FailClosure(2, 2, 1, "boom", true)));
  ASSERT_TRUE(Applies(state, FailClosure(1, 1, 1, "second", true)));
  const Closure* failed = state.FindClosure(2);
  EXPECT_EQ(failed->state, ClosureState::FAILED);
  EXPECT_EQ(failed->error, "boom");
  EXPECT_TRUE(failed->user_error);
  const CoordinatorError* error = state.FindCoordinatorError(7);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->closure_id, 2u);
  EXPECT_EQ(error->error, "boom");
  EXPECT_EQ(state.FindCoordinatorError(8), nullptr);
}

TEST(DispatcherState, AFirstErrorIsTakenOnce) {
  DispatcherState state = ThreeQueued();
  EXPECT_FALSE(PlanTakeFirstError(state, 7, kStamp).has_value());
  ASSERT_TRUE(Applies(state, AssignClosure(2, 2, 1)));
  ASSERT_TRUE(Applies(state, FailClosure(2, 2, 1, "boom", true)));
  std::optional<TakenFirstError> taken = PlanTakeFirstError(state, 7, kStamp);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->closure_id, 2u);
  EXPECT_EQ(taken->message, "boom");
  EXPECT_FALSE(PlanTakeFirstError(state, 8, kStamp).has_value());
  ASSERT_TRUE(AppliesAll(state, taken->updates));
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);
  EXPECT_FALSE(PlanTakeFirstError(state, 7, kStamp).has_value());
  EXPECT_EQ(state.FindClosure(2)->state, ClosureState::FAILED);  // the closure stays
}

TEST(DispatcherState, AnInfrastructureFailureIsNeverTheCoordinatorsFirstError) {
  DispatcherState state = ThreeQueued();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, FailClosure(1, 1, 1, "workers lost", false, true)));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::FAILED);
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);
  ASSERT_TRUE(Applies(state, AssignClosure(2, 1, 1)));
  ASSERT_TRUE(Applies(state, FailClosure(2, 1, 1, "boom")));
  EXPECT_EQ(state.FindCoordinatorError(7)->closure_id, 2u);
}

TEST(DispatcherState, DispatcherMayFailQueuedClosure) {
  DispatcherState state = ThreeQueued();
  ASSERT_TRUE(Applies(state, FailClosure(3, 0, 0, "too many attempts", false)));
  EXPECT_EQ(state.FindClosure(3)->state, ClosureState::FAILED);
  EXPECT_FALSE(state.FindClosure(3)->user_error);
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::QUEUED)), (std::vector<uint64_t>{1, 2}));
}

TEST(DispatcherState, FailingClosureRejectsEmptyErrorAndFinishedClosure) {
  DispatcherState state = ThreeQueued();
  EXPECT_TRUE(Rejects(state, FailClosure(1, 0, 0, ""), StatusCode::kInvalidArgument,
                      "has no error message"));
  EXPECT_TRUE(
      Rejects(state, FailClosure(9, 0, 0, "x"), StatusCode::kNotFound, "closure 9 is unknown"));
  EXPECT_TRUE(Rejects(state, FailClosure(1, 1, 1, "x"), StatusCode::kFailedPrecondition,
                      "closure 1 is queued"));
  ASSERT_TRUE(Applies(state, CancelClosure(1)));
  EXPECT_TRUE(Rejects(state, FailClosure(1, 0, 0, "x"), StatusCode::kFailedPrecondition,
                      "closure 1 is cancelled, not waiting, queued or assigned"));
}

TEST(DispatcherState, CancellingClosureFreesItsWorkerSlot) {
  DispatcherState state = ThreeQueued();
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, CancelClosure(1)));
  ASSERT_TRUE(Applies(state, CancelClosure(2)));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::CANCELLED);
  EXPECT_TRUE(state.ClosuresOnWorker(1).empty());
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::CANCELLED)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(state.NumUnfinishedClosures(7), 1u);
  EXPECT_TRUE(
      Rejects(state, CancelClosure(1), StatusCode::kFailedPrecondition, "closure 1 is cancelled"));
  EXPECT_TRUE(Rejects(state, FinishClosure(1, 1, 1, "late"), StatusCode::kFailedPrecondition,
                      "closure 1 is cancelled"));
}

TEST(DispatcherState, ReleasingClosureForgetsIt) {
  DispatcherState state = ThreeQueued();
  EXPECT_TRUE(Rejects(state, ReleaseClosure(1), StatusCode::kFailedPrecondition,
                      "closure 1 is queued, not finished, failed or cancelled"));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, FinishClosure(1, 1, 1, "r")));
  ASSERT_TRUE(Applies(state, ReleaseClosure(1)));
  EXPECT_EQ(state.FindClosure(1), nullptr);
  EXPECT_EQ(Ids(state.ClosuresForCoordinator(7)), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(state.NumClosuresInState(ClosureState::FINISHED), 0u);
  EXPECT_TRUE(Rejects(state, ReleaseClosure(1), StatusCode::kNotFound, "closure 1 is unknown"));
}

TEST(DispatcherState, ClearingCoordinatorErrorAllowsTheNextOne) {
  DispatcherState state = ThreeQueued();
  EXPECT_TRUE(Rejects(state, ClearCoordinatorError(7), StatusCode::kNotFound,
                      "coordinator 7 has no pending error"));
  ASSERT_TRUE(Applies(state, FailClosure(1, 0, 0, "first")));
  ASSERT_TRUE(Applies(state, ClearCoordinatorError(7)));
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);
  ASSERT_TRUE(Applies(state, FailClosure(2, 0, 0, "next")));
  EXPECT_EQ(state.FindCoordinatorError(7)->error, "next");
}

}  // namespace
}  // namespace dispatch::state
