// HandOverTask: a task whose worker is gone for good is finished on its
// behalf. What it refuses (and then changes nothing), what it does per mode
// (DYNAMIC requeues what the task holds when the job requeues, in whatever
// repetition the provider is at; OFF just ends), and that a journal holding
// it replays to the same state.

#include <gtest/gtest.h>

#include "state/codec.h"
#include "state/dispatcher_state.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

using Indices = std::vector<uint64_t>;

// Workers 1 at "a" and 2 at "b". Job 1 of `mode` (DYNAMIC: one provider,
// requeueing when asked) with task 1 on "a" and task 2 on "b".
DispatcherState TwoTaskJob(ProcessingMode mode, bool requeue = false, uint32_t consumers = 0) {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterDataset(1, 100)));
  EXPECT_TRUE(Applies(state, RegisterWorker(1, "a")));
  EXPECT_TRUE(Applies(state, RegisterWorker(2, "b")));
  JobOptions options;
  options.mode = mode;
  options.num_consumers = consumers;
  if (mode == ProcessingMode::DYNAMIC) {
    options.num_split_providers = 1;
    options.requeue_unfinished_splits = requeue;
  }
  EXPECT_TRUE(Applies(state, CreateJob(1, 1, options)));
  EXPECT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  EXPECT_TRUE(Applies(state, CreateTask(2, 1, "b")));
  return state;
}

// Refused with `code` and `message`, and the state is unchanged.
::testing::AssertionResult RefusesUnchanged(DispatcherState& state, const OwnedUpdate& update,
                                            StatusCode code, const std::string& message) {
  const uint64_t digest = state.Digest();
  ::testing::AssertionResult refused = Rejects(state, update, code, message);
  if (!refused) return refused;
  if (state.Digest() != digest) return ::testing::AssertionFailure() << "the state changed";
  return ::testing::AssertionSuccess();
}

TEST(HandOverTask, IsRefusedForAnUnknownFinishedOrStillServedTask) {
  DispatcherState state = TwoTaskJob(ProcessingMode::DYNAMIC);
  EXPECT_TRUE(RefusesUnchanged(state, HandOverTask(9), StatusCode::kNotFound, "task 9 is unknown"));
  EXPECT_TRUE(RefusesUnchanged(state, HandOverTask(1), StatusCode::kFailedPrecondition,
                               "worker 1 is registered at its address a"));
  ASSERT_TRUE(Applies(state, FinishTask(2)));
  ASSERT_TRUE(Applies(state, RemoveWorker(2)));
  EXPECT_TRUE(RefusesUnchanged(state, HandOverTask(2), StatusCode::kFailedPrecondition,
                               "task 2 is already finished"));
}

TEST(HandOverTask, IsRefusedForStaticShardingAndRoundRobinWhoseTasksWaitForTheirAddress) {
  for (ProcessingMode mode : {ProcessingMode::FILE, ProcessingMode::DATA,
                              ProcessingMode::FILE_OR_DATA, ProcessingMode::HINT}) {
    DispatcherState state = TwoTaskJob(mode);
    ASSERT_TRUE(Applies(state, RemoveWorker(1)));
    EXPECT_TRUE(RefusesUnchanged(state, HandOverTask(1), StatusCode::kFailedPrecondition,
                                 std::string("which is ") + ProcessingModeName(mode) +
                                     ": only DYNAMIC and OFF tasks are handed over"));
    EXPECT_FALSE(state.FindTask(1)->finished);
  }
  DispatcherState rr = TwoTaskJob(ProcessingMode::OFF, false, /*consumers=*/1);
  ASSERT_TRUE(Applies(rr, RemoveWorker(1)));
  EXPECT_TRUE(RefusesUnchanged(rr, HandOverTask(1), StatusCode::kFailedPrecondition,
                               "belongs to round-robin job 1"));
  // A pending round-robin task is refused as such.
  ASSERT_TRUE(Applies(rr, RegisterWorker(3, "c")));
  ASSERT_TRUE(Applies(rr, CreatePendingTask(3, 1, "c", 4)));
  ASSERT_TRUE(Applies(rr, RemoveWorker(3)));
  EXPECT_TRUE(RefusesUnchanged(rr, HandOverTask(3), StatusCode::kFailedPrecondition,
                               "task 3 is a pending round-robin task"));
}

TEST(HandOverTask, FinishesAnOffTaskAndItsJobWithTheLastTask) {
  DispatcherState state = TwoTaskJob(ProcessingMode::OFF);
  ASSERT_TRUE(Applies(state, FinishTask(2)));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  Effects effects;
  ASSERT_TRUE(state.Apply(HandOverTask(1).reader(), &effects).ok());
  EXPECT_TRUE(state.FindTask(1)->finished);
  EXPECT_TRUE(state.TasksForWorker("a").empty());
  EXPECT_TRUE(state.FindJob(1)->finished);
  EXPECT_EQ(effects.tasks_finished, (Indices{1}));
}

TEST(HandOverTask, LeavesTheJobRunningWhileAnotherTaskIsUnfinished) {
  DispatcherState state = TwoTaskJob(ProcessingMode::OFF);
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  ASSERT_TRUE(Applies(state, HandOverTask(1)));
  EXPECT_FALSE(state.FindJob(1)->finished);
  ASSERT_TRUE(Applies(state, FinishTask(2)));
  EXPECT_TRUE(state.FindJob(1)->finished);
}

TEST(HandOverTask, LosesTheSplitsADynamicTaskHoldsWithoutRequeue) {
  DispatcherState state = TwoTaskJob(ProcessingMode::DYNAMIC, /*requeue=*/false);
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0, 1})));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  ASSERT_TRUE(Applies(state, HandOverTask(1)));
  EXPECT_TRUE(state.FindSplitProvider(1, 0)->requeued.empty());
  EXPECT_FALSE(state.FindSplitGrant(1, 0)->outstanding);
  EXPECT_TRUE(state.FindTask(1)->finished);
}

TEST(HandOverTask, RemovalAlreadyRequeuedWhatTheTaskHeldSoTheHandOverAddsNothing) {
  DispatcherState state = TwoTaskJob(ProcessingMode::DYNAMIC, /*requeue=*/true);
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 1, 1, {0, 1})));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  ASSERT_TRUE(Applies(state, HandOverTask(1)));
  const SplitProviderProgress* progress = state.FindSplitProvider(1, 0);
  EXPECT_EQ(Indices(progress->requeued.begin(), progress->requeued.end()), (Indices{0, 1}));
  // The live task takes them, then ends the repetition; the job ends with it.
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 2, 1, {0, 1, 2})));
  ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, 2, 2, {}, true)));
  ASSERT_TRUE(Applies(state, FinishTask(2)));
  EXPECT_TRUE(state.FindJob(1)->finished);
}

// Old journals may end a repetition while another task holds splits of it
// (no planner of today does for requeueing jobs: split_planner.h). A grant
// left outstanding then (its worker still registered at the end) and handed
// over later goes back to the requeue list of the repetition the provider
// is at: a hand-over loses nothing of a requeueing job.
TEST(HandOverTask, RequeuesWhatTheTaskHoldsWhateverRepetitionTheProviderIsAt) {
  // Its worker was removed before it took the splits (ProduceSplit does
  // not ask for a registered worker), so the removal requeued nothing.
  DispatcherState held = TwoTaskJob(ProcessingMode::DYNAMIC, /*requeue=*/true);
  ASSERT_TRUE(Applies(held, RemoveWorker(1)));
  ASSERT_TRUE(Applies(held, ProduceSplit(1, 0, 0, 1, 1, {0, 1})));
  ASSERT_TRUE(Applies(held, ProduceSplit(1, 0, 0, 2, 1, {2}, /*end_of_splits=*/true)));
  ASSERT_EQ(held.FindSplitProvider(1, 0)->repetition, 1);
  ASSERT_TRUE(held.FindSplitGrant(1, 0)->outstanding);
  ASSERT_TRUE(Applies(held, HandOverTask(1)));
  const SplitProviderProgress* progress = held.FindSplitProvider(1, 0);
  EXPECT_EQ(Indices(progress->requeued.begin(), progress->requeued.end()), (Indices{0, 1}));
  EXPECT_FALSE(held.FindSplitGrant(1, 0)->outstanding);
  // The next repetition cannot end before they are handed out again.
  EXPECT_TRUE(Rejects(held, ProduceSplit(1, 1, 0, 2, 2, {}, true), StatusCode::kFailedPrecondition,
                      "2 requeued splits left"));
  EXPECT_TRUE(Applies(held, ProduceSplit(1, 1, 0, 2, 2, {0, 1})));
}

TEST(HandOverTask, AJournalHoldingItReplaysToTheSameState) {
  DispatcherState live = TwoTaskJob(ProcessingMode::DYNAMIC, /*requeue=*/true);
  std::vector<OwnedUpdate> journal;
  journal.push_back(ProduceSplit(1, 0, 0, 1, 1, {0, 1}).At(10));
  journal.push_back(RemoveWorker(1).At(11));
  journal.push_back(HandOverTask(1).At(12));
  journal.push_back(ProduceSplit(1, 0, 0, 2, 1, {0, 1, 2}).At(13));
  DispatcherState replayed = TwoTaskJob(ProcessingMode::DYNAMIC, /*requeue=*/true);
  for (const OwnedUpdate& update : journal) {
    ASSERT_TRUE(Applies(live, update));
    ASSERT_TRUE(Applies(replayed, OwnedUpdate::FromBytes(update.ToBytes())));
  }
  EXPECT_EQ(replayed.Digest(), live.Digest());
  Result<DispatcherState> restored = DecodeSnapshot(EncodeSnapshot(live));
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->Digest(), live.Digest());
  EXPECT_TRUE(restored->FindTask(1)->finished);
}

}  // namespace
}  // namespace dispatch::state
