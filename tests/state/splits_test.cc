// ProduceSplit, and what worker removal and task completion do to the splits
// a task holds: order, repetitions, idempotence by sequence, requeueing.

#include <gtest/gtest.h>

#include "state/codec.h"
#include "state/dispatcher_state.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

using Indices = std::vector<uint64_t>;

// Job 1: DYNAMIC with two split providers; task 1 on worker 1 ("a"), task 2
// on worker 2 ("b"). Job 2: OFF, task 3 on "a".
DispatcherState DynamicJob(bool requeue) {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterDataset(1, 100)));
  EXPECT_TRUE(Applies(state, RegisterWorker(1, "a")));
  EXPECT_TRUE(Applies(state, RegisterWorker(2, "b")));
  JobOptions options;
  options.mode = ProcessingMode::DYNAMIC;
  options.num_split_providers = 2;
  options.requeue_unfinished_splits = requeue;
  EXPECT_TRUE(Applies(state, CreateJob(1, 1, options)));
  EXPECT_TRUE(Applies(state, CreateJob(2, 1)));
  EXPECT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  EXPECT_TRUE(Applies(state, CreateTask(2, 1, "b")));
  EXPECT_TRUE(Applies(state, CreateTask(3, 2, "a")));
  return state;
}

TEST(DispatcherState, ProducingSplitsHandsThemOutInOrderPerProvider) {
  DispatcherState state = DynamicJob(false);
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0})));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 2, 1, {1, 2, 3})));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 1, 1, 1, {0})));
  EXPECT_EQ(state.FindSplitProvider(1, 0)->next_index, 4u);
  EXPECT_EQ(state.FindSplitProvider(1, 1)->next_index, 1u);
  const SplitGrant* grant = state.FindSplitGrant(2, 0);
  ASSERT_NE(grant, nullptr);
  EXPECT_EQ(grant->sequence, 1u);
  EXPECT_EQ(grant->repetition, 0);
  EXPECT_EQ(grant->split_indices, (Indices{1, 2, 3}));
  EXPECT_FALSE(grant->end_of_splits);
  EXPECT_TRUE(grant->outstanding);
  EXPECT_EQ(state.SplitGrantsForJob(1).size(), 3u);
  EXPECT_TRUE(state.SplitGrantsForJob(2).empty());
}

TEST(DispatcherState, EndOfSplitsStartsTheNextRepetitionAtIndexZero) {
  DispatcherState state = DynamicJob(false);
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0, 1})));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 2, 1, {2}, /*end_of_splits=*/true)));
  const SplitProviderProgress* progress = state.FindSplitProvider(1, 0);
  EXPECT_EQ(progress->repetition, 1);
  EXPECT_EQ(progress->next_index, 0u);
  EXPECT_TRUE(state.FindSplitGrant(2, 0)->end_of_splits);
  EXPECT_EQ(state.FindSplitProvider(1, 1)->repetition, 0);
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 1, 2, {0}), StatusCode::kFailedPrecondition,
                      "job 1 split provider 0 is at repetition 1, not 0"));
  EXPECT_TRUE(Applies(state, ProduceSplit(1, 1, 0, 1, 2, {0})));
}

TEST(DispatcherState, ProducingSplitRejectsUnknownJobNonDynamicJobAndMissingProvider) {
  DispatcherState state = DynamicJob(false);
  EXPECT_TRUE(
      Rejects(state, ProduceSplit(9, 0, 0, 1, 1, {0}), StatusCode::kNotFound, "job 9 is unknown"));
  EXPECT_TRUE(Rejects(state, ProduceSplit(2, 0, 0, 3, 1, {0}), StatusCode::kFailedPrecondition,
                      "job 2 is OFF, not DYNAMIC"));
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 2, 1, 1, {0}), StatusCode::kNotFound,
                      "job 1 has no split provider 2"));
}

TEST(DispatcherState, ProducingSplitRejectsForeignUnknownOrFinishedTask) {
  DispatcherState state = DynamicJob(false);
  EXPECT_TRUE(
      Rejects(state, ProduceSplit(1, 0, 0, 9, 1, {0}), StatusCode::kNotFound, "task 9 is unknown"));
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 3, 1, {0}), StatusCode::kFailedPrecondition,
                      "task 3 belongs to job 2, not job 1"));
  ASSERT_TRUE(Applies(state, FinishTask(1)));
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 1, 1, {0}), StatusCode::kFailedPrecondition,
                      "task 1 is finished"));
  ASSERT_TRUE(Applies(state, FinishTask(2)));
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 2, 1, {0}), StatusCode::kFailedPrecondition,
                      "job 1 is finished"));
}

TEST(DispatcherState, ProducingSplitRejectsSequenceThatIsNotNewer) {
  DispatcherState state = DynamicJob(false);
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 1, 0, {0}), StatusCode::kFailedPrecondition,
                      "sequence 0 is not newer"));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 5, {0})));
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 1, 5, {1}), StatusCode::kFailedPrecondition,
                      "task 1 already used sequence 5"));
  // Sequences are per provider.
  EXPECT_TRUE(Applies(state, ProduceSplit(1, 0, 1, 1, 1, {0})));
}

TEST(DispatcherState, ProducingSplitRejectsSkippedOrRepeatedSplit) {
  DispatcherState state = DynamicJob(false);
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 1, 1, {1}), StatusCode::kFailedPrecondition,
                      "split 1 is out of order, expected 0"));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0})));
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 2, 1, {0}), StatusCode::kFailedPrecondition,
                      "split 0 is out of order, expected 1"));
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 2, 1, {1, 3}), StatusCode::kFailedPrecondition,
                      "split 3 is out of order, expected 2"));
}

TEST(DispatcherState, RemovingWorkerLosesItsSplitsByDefault) {
  DispatcherState state = DynamicJob(false);
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0, 1})));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  EXPECT_TRUE(state.FindSplitProvider(1, 0)->requeued.empty());
  EXPECT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 2, 1, {2})));
}

TEST(DispatcherState, RemovingWorkerRequeuesItsOutstandingSplitsWhenTheJobAsks) {
  DispatcherState state = DynamicJob(true);
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0, 1})));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 2, 1, {2})));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  const SplitProviderProgress* progress = state.FindSplitProvider(1, 0);
  EXPECT_EQ(Indices(progress->requeued.begin(), progress->requeued.end()), (Indices{0, 1}));
  EXPECT_FALSE(state.FindSplitGrant(1, 0)->outstanding);
  // Requeued splits go first, in order; the end needs them all handed out.
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 2, 2, {3}), StatusCode::kFailedPrecondition,
                      "split 3 is out of order, expected 0"));
  EXPECT_TRUE(Rejects(state, ProduceSplit(1, 0, 0, 2, 2, {0}, true),
                      StatusCode::kFailedPrecondition, "1 requeued splits left"));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 2, 2, {0, 1, 3})));
  EXPECT_TRUE(state.FindSplitProvider(1, 0)->requeued.empty());
  EXPECT_EQ(state.FindSplitProvider(1, 0)->next_index, 4u);
}

TEST(DispatcherState, NextRequestConsumesThePreviousSplits) {
  DispatcherState state = DynamicJob(true);
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0})));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 2, {1})));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  const SplitProviderProgress* progress = state.FindSplitProvider(1, 0);
  EXPECT_EQ(Indices(progress->requeued.begin(), progress->requeued.end()), (Indices{1}));
}

TEST(DispatcherState, FinishingTaskConsumesItsSplits) {
  DispatcherState state = DynamicJob(true);
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0})));
  ASSERT_TRUE(Applies(state, FinishTask(1)));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  EXPECT_TRUE(state.FindSplitProvider(1, 0)->requeued.empty());
}

TEST(DispatcherState, SplitsOfAnEndedRepetitionAreNotRequeued) {
  DispatcherState state = DynamicJob(true);
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0})));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 2, 1, {1}, true)));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  EXPECT_TRUE(state.FindSplitProvider(1, 0)->requeued.empty());
}

TEST(DispatcherState, RetriedSplitRequestFindsTheSameAnswerAfterARestart) {
  DispatcherState state = DynamicJob(false);
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 7, {0, 1})));
  Result<DispatcherState> restarted = DecodeSnapshot(EncodeSnapshot(state));
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  const SplitGrant* grant = restarted->FindSplitGrant(1, 0);
  ASSERT_NE(grant, nullptr);
  EXPECT_EQ(grant->sequence, 7u);
  EXPECT_EQ(grant->split_indices, (Indices{0, 1}));
  // The retry is answered from the grant; a new update for it is refused.
  EXPECT_TRUE(Rejects(*restarted, ProduceSplit(1, 0, 0, 1, 7, {2}), StatusCode::kFailedPrecondition,
                      "already used sequence 7"));
  EXPECT_TRUE(Applies(*restarted, ProduceSplit(1, 0, 0, 1, 8, {2})));
}

TEST(DispatcherState, RemovingTaskDropsItsSplitGrants) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterDataset(1, 1)));
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  JobOptions options;
  options.mode = ProcessingMode::DYNAMIC;
  options.num_split_providers = 1;
  options.num_consumers = 1;
  ASSERT_TRUE(Applies(state, CreateJob(1, 1, options)));
  ASSERT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0})));
  ASSERT_TRUE(Applies(state, RemoveTask(1)));
  EXPECT_EQ(state.FindSplitGrant(1, 0), nullptr);
}

}  // namespace
}  // namespace dispatch::state
