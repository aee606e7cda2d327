// Closure batches (many closures of one kind in one record), per-worker
// resources, and transient put-backs. A batch is all or nothing: one bad item
// rejects the record and changes nothing.

#include <gtest/gtest.h>

#include "state/dispatcher_state.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

DispatcherState TwoWorkers() {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterWorker(1, "a")));
  EXPECT_TRUE(Applies(state, RegisterWorker(2, "b")));
  return state;
}

TEST(ClosureBatch, SchedulingManyQueuesThemInListOrder) {
  DispatcherState state = TwoWorkers();
  ASSERT_TRUE(Applies(state, ScheduleClosures({1, 2, 5}, 7, {10, 11, 12})));
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::QUEUED)), (std::vector<uint64_t>{1, 2, 5}));
  EXPECT_EQ(state.NextClosureId(), 6u);
  EXPECT_EQ(state.FindClosureByRequest(7, 11)->id, 2u);
  EXPECT_EQ(state.NumUnfinishedClosures(7), 3u);
}

TEST(ClosureBatch, SchedulingRejectsDecreasingIdsRepeatedRequestsAndUsedRequests) {
  DispatcherState state = TwoWorkers();
  EXPECT_TRUE(Rejects(state, ScheduleClosures({2, 1}, 7), StatusCode::kInvalidArgument,
                      "ids must increase"));
  EXPECT_TRUE(Rejects(state, ScheduleClosures({1, 2}, 7, {4, 4}), StatusCode::kInvalidArgument,
                      "repeats request 4 of coordinator 7"));
  ASSERT_TRUE(Applies(state, ScheduleClosures({1}, 7, {4})));
  EXPECT_TRUE(Rejects(state, ScheduleClosures({2, 3}, 7, {5, 4}), StatusCode::kAlreadyExists,
                      "request 4 already scheduled closure 1"));
  EXPECT_EQ(state.NextClosureId(), 2u);
}

TEST(ClosureBatch, RetiredSingleClosureVariantsAreRefusedLikeInvalid) {
  DispatcherState state = TwoWorkers();
  ASSERT_TRUE(Applies(state, ScheduleClosures({1}, 7)));
  for (auto set : {+[](journal::Update::Builder u) { u.setRetiredClosureScheduled(); },
                   +[](journal::Update::Builder u) { u.setRetiredClosureAssigned(); },
                   +[](journal::Update::Builder u) { u.setRetiredClosureFinished(); },
                   +[](journal::Update::Builder u) { u.setRetiredClosureCancelled(); },
                   +[](journal::Update::Builder u) { u.setRetiredClosureReleased(); }}) {
    OwnedUpdate retired;
    set(retired.builder());
    EXPECT_TRUE(Rejects(state, retired, StatusCode::kInvalidArgument, "retired transition"));
  }
}

TEST(ClosureBatch, AssigningFinishingAndReleasingManyMoveEachClosure) {
  DispatcherState state = TwoWorkers();
  ASSERT_TRUE(Applies(state, ScheduleClosures({1, 2, 3}, 7)));
  ASSERT_TRUE(Applies(state, AssignClosures({{1, 1, 1}, {2, 2, 1}, {3, 1, 1}})));
  EXPECT_EQ(Ids(state.ClosuresOnWorker(1)), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(Ids(state.ClosuresOnWorker(2)), (std::vector<uint64_t>{2}));
  ASSERT_TRUE(Applies(state, FinishClosures({{3, 1, 1}, {2, 2, 1}})));
  EXPECT_EQ(state.FindClosure(3)->result, "result-3");
  EXPECT_EQ(state.NumUnfinishedClosures(7), 1u);
  ASSERT_TRUE(Applies(state, ReleaseClosures({2, 3})));
  EXPECT_EQ(state.FindClosure(2), nullptr);
  EXPECT_EQ(Ids(state.ClosuresForCoordinator(7)), (std::vector<uint64_t>{1}));
}

TEST(ClosureBatch, OneBadItemRejectsTheWholeBatch) {
  DispatcherState state = TwoWorkers();
  ASSERT_TRUE(Applies(state, ScheduleClosures({1, 2, 3}, 7)));
  EXPECT_TRUE(Rejects(state, AssignClosures({{1, 1, 1}, {2, 9, 1}}), StatusCode::kNotFound,
                      "unknown worker 9"));
  EXPECT_TRUE(Rejects(state, AssignClosures({{1, 1, 1}, {1, 2, 1}}), StatusCode::kInvalidArgument,
                      "names closure 1 twice"));
  ASSERT_TRUE(Applies(state, AssignClosures({{1, 1, 1}})));
  EXPECT_TRUE(Rejects(state, FinishClosures({{1, 1, 1}, {2, 1, 1}}),
                      StatusCode::kFailedPrecondition, "closure 2 is queued, not assigned"));
  EXPECT_TRUE(Rejects(state, FinishClosures({{1, 2, 1}}), StatusCode::kFailedPrecondition,
                      "runs as attempt 1 on worker 1"));
  EXPECT_TRUE(Rejects(state, ReleaseClosures({1}), StatusCode::kFailedPrecondition,
                      "closure 1 is assigned, not finished, failed or cancelled"));
  EXPECT_TRUE(Rejects(state, CancelClosures({2, 2}), StatusCode::kInvalidArgument, "twice"));
  EXPECT_TRUE(Rejects(state, CancelClosures({3, 8}), StatusCode::kNotFound, "closure 8"));
}

TEST(ClosureBatch, CancellingManyFreesTheirWorkersAndQueue) {
  DispatcherState state = TwoWorkers();
  ASSERT_TRUE(Applies(state, ScheduleClosures({1, 2, 3}, 7)));
  ASSERT_TRUE(Applies(state, AssignClosures({{1, 2, 1}})));
  ASSERT_TRUE(Applies(state, CancelClosures({1, 3}).At(50)));
  EXPECT_TRUE(state.ClosuresOnWorker(2).empty());
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::QUEUED)), (std::vector<uint64_t>{2}));
  EXPECT_EQ(state.FindClosure(3)->state, ClosureState::CANCELLED);
  EXPECT_EQ(state.FindClosure(3)->done_micros, 50);
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);  // cancelling is not an error
}

TEST(PerWorkerResource, CreatingOneRecordsItsFunctionAndArgs) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, CreateResource(1, 7, "make", "cfg")));
  const PerWorkerResource* resource = state.FindResource(1);
  ASSERT_NE(resource, nullptr);
  EXPECT_EQ(resource->function_name, "make");
  EXPECT_EQ(resource->args, "cfg");
  EXPECT_EQ(resource->coordinator_id, 7u);
  EXPECT_EQ(state.NextResourceId(), 2u);
  EXPECT_TRUE(Rejects(state, CreateResource(1, 7), StatusCode::kAlreadyExists, "already exists"));
  EXPECT_TRUE(Rejects(state, CreateResource(0, 7), StatusCode::kInvalidArgument, "id 0"));
  EXPECT_TRUE(Rejects(state, CreateResource(2, 7, ""), StatusCode::kInvalidArgument,
                      "has no function name"));
}

TEST(PerWorkerResource, ARequestIdNamesOneResourceOfItsCoordinator) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, CreateResource(1, 7, "make", "cfg", 40)));
  EXPECT_EQ(state.FindResourceByRequest(7, 40)->id, 1u);
  EXPECT_EQ(state.FindResourceByRequest(8, 40), nullptr);
  EXPECT_TRUE(Rejects(state, CreateResource(2, 7, "make", "cfg", 40), StatusCode::kAlreadyExists,
                      "coordinator 7 request 40 already created per-worker resource 1"));
  ASSERT_TRUE(Applies(state, CreateResource(2, 8, "make", "cfg", 40)));  // another coordinator
  ASSERT_TRUE(Applies(state, CreateResource(3, 7, "make", "cfg", 0)));   // no key
  ASSERT_TRUE(Applies(state, CreateResource(4, 7, "make", "cfg", 0)));
  EXPECT_EQ(state.FindResourceByRequest(8, 40)->id, 2u);
  EXPECT_TRUE(state.CheckIndexes().ok());
}

TEST(PerWorkerResource, ClosureMayUseOnlyExistingResources) {
  DispatcherState state;
  EXPECT_TRUE(Rejects(state, ScheduleClosure(1, 7, "use", "", 0, {1}), StatusCode::kNotFound,
                      "closure 1 uses unknown per-worker resource 1"));
  ASSERT_TRUE(Applies(state, CreateResource(1, 7)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "use", "", 0, {1, 1})));
  EXPECT_EQ(state.FindClosure(1)->resources, (std::vector<uint64_t>{1, 1}));
}

TEST(DispatcherState, TransientPutBackCountsOnlyTransientFailures) {
  DispatcherState state = TwoWorkers();
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7)));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(Applies(state, PutBackClosure(1, 1, 1, /*transient=*/true)));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 2, 2)));
  ASSERT_TRUE(Applies(state, PutBackClosure(1, 2, 2, /*transient=*/false)));
  EXPECT_EQ(state.FindClosure(1)->transient_failures, 1u);
  EXPECT_EQ(state.FindClosure(1)->attempts, 2u);
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::QUEUED);
}

}  // namespace
}  // namespace dispatch::state
