// getSplit's decision (state/split_planner.h) on states built with the update
// builders: splits in order, end of splits and the next repetition, retries
// answered from the grant, the clamps (the caller's, the flag's, one journal
// record's), requeued splits first, and every refusal with the text the
// reactor has always sent. Every plan is applied to prove its Updates valid.

#include "state/split_planner.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "state/codec.h"
#include "state/dispatcher_state.h"
#include "state/record_budget.h"
#include "tests/state/planner_test_support.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

using Indices = std::vector<uint64_t>;

// Every dataset has `splits` splits.
SplitSourceLookup Splits(uint64_t splits) {
  return [splits](uint64_t) -> Result<SplitSourceSummary> {
    return SplitSourceSummary{true, splits};
  };
}

JobOptions Dynamic(bool requeue = false) {
  JobOptions options;
  options.mode = ProcessingMode::DYNAMIC;
  options.num_split_providers = 1;
  options.requeue_unfinished_splits = requeue;
  return options;
}

// Dataset 1; workers 1 at "a" and 2 at "b"; job 1 (DYNAMIC unless said)
// with task 1 on "a" and task 2 on "b".
DispatcherState OneJob(const JobOptions& options = Dynamic()) {
  DispatcherState state;
  ApplyEach(state, RegisterDataset(1, 100), RegisterWorker(1, "a"), RegisterWorker(2, "b"),
            CreateJob(1, 1, options), CreateTask(1, 1, "a"), CreateTask(2, 1, "b"));
  return state;
}

GetSplitRequest Ask(uint64_t task_id, uint64_t sequence, uint64_t max_splits = 1,
                    int64_t repetition = 0) {
  GetSplitRequest request;
  request.task_id = task_id;
  request.sequence = sequence;
  request.max_splits = max_splits;
  request.repetition = repetition;
  return request;
}

// Plans `request` and applies the plan; the answer.
SplitAnswer Take(DispatcherState& state, const GetSplitRequest& request,
                 const SplitSourceLookup& sources = Splits(3), const Stamp& stamp = kStamp,
                 const DataPolicy& policy = {}) {
  Result<GetSplitPlan> plan = PlanGetSplit(state, request, sources, stamp, policy);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  EXPECT_TRUE(AppliesAll(state, plan->updates));
  return plan->answer;
}

Status Refusal(const DispatcherState& state, const GetSplitRequest& request,
               const DataPolicy& policy = {}, const SplitSourceLookup& sources = Splits(3)) {
  return PlanGetSplit(state, request, sources, kStamp, policy).status();
}

TEST(SplitPlanner, HandsOutSplitsInOrderThenEndOfSplitsThenTheNextRepetition) {
  DispatcherState state = OneJob();
  EXPECT_EQ(Take(state, Ask(1, 1, 2)).split_indices, (Indices{0, 1}));
  EXPECT_EQ(Take(state, Ask(2, 1, 2)).split_indices, (Indices{2}));
  const SplitAnswer end = Take(state, Ask(1, 2, 2));
  EXPECT_TRUE(end.end_of_splits);
  EXPECT_TRUE(end.split_indices.empty());
  EXPECT_EQ(state.FindSplitProvider(1, 0)->repetition, 1);
  // The other task's request for the ended repetition: end of splits, journaling nothing.
  Result<GetSplitPlan> late = PlanGetSplit(state, Ask(2, 2, 2, 0), Splits(3), kStamp, {});
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->answer.end_of_splits);
  EXPECT_EQ(late->answer.repetition, 0);
  EXPECT_TRUE(late->updates.empty());
  EXPECT_EQ(Take(state, Ask(2, 3, 2, 1)).split_indices, (Indices{0, 1}));
}

TEST(SplitPlanner, ARetryIsAnsweredFromTheGrantAndAnOlderSequenceIsRefused) {
  DispatcherState state = OneJob();
  EXPECT_EQ(Take(state, Ask(1, 5, 2)).split_indices, (Indices{0, 1}));
  Result<GetSplitPlan> retry = PlanGetSplit(state, Ask(1, 5, 3), Splits(3), kStamp, {});
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->answer.split_indices, (Indices{0, 1}));
  EXPECT_FALSE(retry->answer.end_of_splits);
  EXPECT_TRUE(retry->updates.empty());
  const Status older = Refusal(state, Ask(1, 4));
  EXPECT_EQ(older.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(older.message(),
            "task 1 split provider 0: sequence 4 is older than its last request, sequence 5");
}

TEST(SplitPlanner, APlantedRetryBugAnswersARetryWithFreshSplits) {
  DispatcherState state = OneJob();
  Take(state, Ask(1, 5));
  DataPolicy buggy;
  buggy.planted_bug = PlantedBug::kSplitRetryNotIdempotent;
  Result<GetSplitPlan> retry = PlanGetSplit(state, Ask(1, 5), Splits(3), kStamp, buggy);
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->answer.split_indices, (Indices{1}));
  ASSERT_EQ(retry->updates.size(), 1u);
  EXPECT_EQ(retry->updates[0].getProduceSplit().getSequence(), 6u);
}

TEST(SplitPlanner, ARequestGetsAtMostTheFlagsAndOneRecordsWorthNeverARefusal) {
  DispatcherState state = OneJob();
  DataPolicy policy;
  policy.max_splits_per_call = 4;
  EXPECT_EQ(Take(state, Ask(1, 1, 100), Splits(1000), kStamp, policy).split_indices.size(), 4u);
  EXPECT_EQ(Take(state, Ask(1, 2, 0), Splits(1000), kStamp, policy).split_indices.size(), 1u);

  const Stamp small{kStamp.time_micros, 512};
  const size_t fit = SplitIndicesPerRecord(small.max_record_bytes);
  ASSERT_LT(fit, 1000u);
  Result<GetSplitPlan> plan = PlanGetSplit(state, Ask(1, 3, 1000), Splits(1000), small, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->answer.split_indices.size(), fit);
  ASSERT_EQ(plan->updates.size(), 1u);
  capnp::MallocMessageBuilder message;
  message.setRoot(plan->updates[0]);
  EXPECT_LE(EncodeMessage(message).size(), small.max_record_bytes);
  EXPECT_TRUE(AppliesAll(state, plan->updates));
}

TEST(SplitPlanner, ADeadWorkersOutstandingSplitsGoFirstWhenTheJobRequeues) {
  DispatcherState state = OneJob(Dynamic(/*requeue=*/true));
  EXPECT_EQ(Take(state, Ask(1, 1, 2)).split_indices, (Indices{0, 1}));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  EXPECT_EQ(Take(state, Ask(2, 1, 3)).split_indices, (Indices{0, 1, 2}));
}

// Today's answer in a requeueing job while another task holds splits of the
// repetition: none now, ask again. The holder's worker dies; its splits come
// back to the asker instead of ending the repetition without them.
TEST(SplitPlanner, ARequeueingJobSaysNoneNowWhileAnotherTaskHoldsSplitsOfTheRepetition) {
  DispatcherState state = OneJob(Dynamic(/*requeue=*/true));
  EXPECT_EQ(Take(state, Ask(1, 1, 2)).split_indices, (Indices{0, 1}));
  EXPECT_EQ(Take(state, Ask(2, 1, 2)).split_indices, (Indices{2}));
  const SplitAnswer none = Take(state, Ask(2, 2, 2));
  EXPECT_FALSE(none.end_of_splits);
  EXPECT_TRUE(none.split_indices.empty());
  EXPECT_EQ(state.FindSplitProvider(1, 0)->repetition, 0);
  // The empty grant is journaled: a retry gets it again, and it consumed
  // what task 2 held (split 2), as any request does.
  EXPECT_FALSE(state.FindSplitGrant(2, 0)->outstanding);
  EXPECT_EQ(state.FindSplitGrant(2, 0)->sequence, 2u);
  Result<GetSplitPlan> retry = PlanGetSplit(state, Ask(2, 2, 2), Splits(3), kStamp, {});
  ASSERT_TRUE(retry.ok());
  EXPECT_TRUE(retry->updates.empty());
  EXPECT_FALSE(retry->answer.end_of_splits);
  // Task 1's worker dies: its splits are requeued (same repetition) and go
  // to task 2; then nothing is held elsewhere and the repetition ends.
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  EXPECT_EQ(Take(state, Ask(2, 3, 2)).split_indices, (Indices{0, 1}));
  EXPECT_TRUE(Take(state, Ask(2, 4, 2)).end_of_splits);
  EXPECT_EQ(state.FindSplitProvider(1, 0)->repetition, 1);
}

TEST(SplitPlanner, TheHolderAskingAgainEndsTheRepetitionForEveryone) {
  DispatcherState state = OneJob(Dynamic(/*requeue=*/true));
  EXPECT_EQ(Take(state, Ask(1, 1, 3)).split_indices, (Indices{0, 1, 2}));
  EXPECT_FALSE(Take(state, Ask(2, 1)).end_of_splits);  // none now
  // Task 1 asks again: its own grant counts as consumed, nobody holds any.
  EXPECT_TRUE(Take(state, Ask(1, 2)).end_of_splits);
  EXPECT_TRUE(Take(state, Ask(2, 2)).end_of_splits);  // that repetition is over
}

TEST(SplitPlanner, WithoutRequeueOrWhenTheHolderFinishedTheEndComesAtOnce) {
  DispatcherState lossy = OneJob(Dynamic(/*requeue=*/false));
  EXPECT_EQ(Take(lossy, Ask(1, 1, 3)).split_indices, (Indices{0, 1, 2}));
  EXPECT_TRUE(Take(lossy, Ask(2, 1)).end_of_splits);
  DispatcherState state = OneJob(Dynamic(/*requeue=*/true));
  EXPECT_EQ(Take(state, Ask(1, 1, 3)).split_indices, (Indices{0, 1, 2}));
  ASSERT_TRUE(Applies(state, FinishTask(1)));
  EXPECT_TRUE(Take(state, Ask(2, 1)).end_of_splits);
}

TEST(SplitPlanner, AHandedOverHoldersSplitsComeBackToTheTaskThatWaited) {
  DispatcherState state = OneJob(Dynamic(/*requeue=*/true));
  // Its worker was removed before this grant (a removed worker that still
  // asks, e.g. a half-open one): the removal requeued nothing.
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  EXPECT_EQ(Take(state, Ask(1, 1, 3)).split_indices, (Indices{0, 1, 2}));
  EXPECT_FALSE(Take(state, Ask(2, 1)).end_of_splits);
  ASSERT_TRUE(Applies(state, HandOverTask(1)));
  EXPECT_EQ(Take(state, Ask(2, 2, 3)).split_indices, (Indices{0, 1, 2}));
  EXPECT_TRUE(Take(state, Ask(2, 3)).end_of_splits);
}

TEST(SplitPlanner, BadRequestsGetTheErrorsTheReactorAlwaysSent) {
  DispatcherState state = OneJob();
  EXPECT_EQ(Refusal(state, Ask(9, 1)).message(), "task 9 is unknown (removed, or never created)");
  DataPolicy forgetful;
  forgetful.fault_tolerant_mode = false;
  ApplyEach(state, CreateJob(2, 1), CreateTask(4, 2, "a"));  // an OFF job
  EXPECT_EQ(Refusal(state, Ask(9, 1), forgetful).code(), StatusCode::kNotFound);
  EXPECT_EQ(Refusal(state, Ask(9, 1), forgetful).message(),
            "task 9 is unknown (removed, or never created)");  // never issued
  DispatcherState forgotten = state.EmptyKeepingCounters();
  EXPECT_EQ(Refusal(forgotten, Ask(1, 1), forgetful).message(),
            "task 1 is unknown; the dispatcher runs without fault-tolerant mode "
            "(--fault-tolerant-mode=false), so a dispatcher restart forgot it and its job: "
            "create the job again");
  EXPECT_EQ(Refusal(state, Ask(4, 1)).message(),
            "job 2 of task 4 is OFF, not DYNAMIC, and has no splits");
  GetSplitRequest provider = Ask(1, 1);
  provider.provider_index = 1;
  EXPECT_EQ(Refusal(state, provider).code(), StatusCode::kNotFound);
  EXPECT_EQ(Refusal(state, provider).message(), "job 1 has no split provider 1");
  EXPECT_EQ(Refusal(state, Ask(1, 0)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Refusal(state, Ask(1, 0)).message(), "split request sequence numbers start at 1");
  const SplitSourceLookup damaged = [](uint64_t) -> Result<SplitSourceSummary> {
    return DataLossError("dataset 1: damaged");
  };
  EXPECT_EQ(Refusal(state, Ask(1, 1), {}, damaged).code(), StatusCode::kDataLoss);
  EXPECT_EQ(Refusal(state, Ask(1, 1, 1, 1)).message(),
            "job 1 split provider 0 is at repetition 0, not 1");
  ASSERT_TRUE(Applies(state, FinishTask(1)));
  EXPECT_EQ(Refusal(state, Ask(1, 1)).message(), "task 1 is finished");
  ApplyEach(state, AcquireJobClient(1, 1), ReleaseJobClient(1), GarbageCollectJob(1));
  EXPECT_EQ(Refusal(state, Ask(2, 1)).message(), "job 1 has been garbage-collected");
}

}  // namespace
}  // namespace dispatch::state
