// CreateJob, AcquireJobClient, ReleaseJobClient and GarbageCollectJob: what
// they change and each rejection.

#include <gtest/gtest.h>

#include "state/dispatcher_state.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

JobOptions Named(const std::string& name, int64_t index) {
  JobOptions options;
  options.name = NamedJobKey{name, index};
  return options;
}

JobOptions Dynamic(uint32_t providers, bool requeue = false) {
  JobOptions options;
  options.mode = ProcessingMode::DYNAMIC;
  options.num_split_providers = providers;
  options.requeue_unfinished_splits = requeue;
  return options;
}

DispatcherState WithDataset() {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterDataset(1, 100)));
  return state;
}

TEST(DispatcherState, CreatingJobAddsUnfinishedJobWithoutClients) {
  DispatcherState state = WithDataset();
  JobOptions options;
  options.mode = ProcessingMode::FILE_OR_DATA;
  options.num_consumers = 3;
  options.target_workers = TargetWorkers::LOCAL;
  ASSERT_TRUE(Applies(state, CreateJob(4, 1, options).At(50)));
  const Job* job = state.FindJob(4);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->dataset_id, 1u);
  EXPECT_EQ(job->processing_mode, ProcessingMode::FILE_OR_DATA);
  EXPECT_EQ(job->num_consumers, 3u);
  EXPECT_TRUE(job->IsRoundRobin());
  EXPECT_EQ(job->target_workers, TargetWorkers::LOCAL);
  EXPECT_FALSE(job->named_key.has_value());
  EXPECT_TRUE(job->providers.empty());
  EXPECT_EQ(job->num_clients, 0);
  EXPECT_EQ(job->last_client_released_micros, -1);
  EXPECT_FALSE(job->finished);
  EXPECT_FALSE(job->garbage_collected);
  EXPECT_EQ(job->created_micros, 50);
  EXPECT_EQ(state.NextJobId(), 5u);
}

TEST(DispatcherState, CreatingDynamicJobStartsEveryProviderAtRepetitionZero) {
  DispatcherState state = WithDataset();
  ASSERT_TRUE(Applies(state, CreateJob(1, 1, Dynamic(3, true))));
  const Job* job = state.FindJob(1);
  ASSERT_EQ(job->providers.size(), 3u);
  EXPECT_TRUE(job->requeue_unfinished_splits);
  for (uint32_t p = 0; p < 3; ++p) {
    const SplitProviderProgress* progress = state.FindSplitProvider(1, p);
    ASSERT_NE(progress, nullptr);
    EXPECT_EQ(progress->repetition, 0);
    EXPECT_EQ(progress->next_index, 0u);
  }
  EXPECT_EQ(state.FindSplitProvider(1, 3), nullptr);
}

TEST(DispatcherState, CreatingNamedJobMakesItTheHolderOfItsKey) {
  DispatcherState state = WithDataset();
  ASSERT_TRUE(Applies(state, CreateJob(1, 1, Named("train", 0))));
  const Job* job = state.FindNamedJob(NamedJobKey{"train", 0});
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->id, 1u);
  EXPECT_EQ(state.FindNamedJob(NamedJobKey{"train", 1}), nullptr);
  ASSERT_TRUE(Applies(state, CreateJob(2, 1, Named("train", 1))));
  EXPECT_EQ(state.FindNamedJob(NamedJobKey{"train", 1})->id, 2u);
}

TEST(DispatcherState, CreatingJobRejectsBadIdsAndUnknownDataset) {
  DispatcherState state = WithDataset();
  EXPECT_TRUE(Rejects(state, CreateJob(0, 1), StatusCode::kInvalidArgument, "job id 0"));
  EXPECT_TRUE(
      Rejects(state, CreateJob(3, 9), StatusCode::kNotFound, "job 3 names unknown dataset 9"));
  ASSERT_TRUE(Applies(state, CreateJob(3, 1)));
  EXPECT_TRUE(Rejects(state, CreateJob(3, 1), StatusCode::kAlreadyExists, "job 3 already exists"));
  EXPECT_TRUE(Rejects(state, CreateJob(2, 1), StatusCode::kInvalidArgument, "job 2 reuses"));
}

TEST(DispatcherState, CreatingJobRejectsHeldOrEmptyName) {
  DispatcherState state = WithDataset();
  ASSERT_TRUE(Applies(state, CreateJob(1, 1, Named("train", 0))));
  EXPECT_TRUE(Rejects(state, CreateJob(2, 1, Named("train", 0)), StatusCode::kAlreadyExists,
                      "job name 'train' index 0 is held by job 1"));
  EXPECT_TRUE(Rejects(state, CreateJob(2, 1, Named("", 0)), StatusCode::kInvalidArgument,
                      "empty job name"));
}

TEST(DispatcherState, CreatingJobRejectsSplitProvidersThatDoNotMatchTheMode) {
  DispatcherState state = WithDataset();
  EXPECT_TRUE(Rejects(state, CreateJob(1, 1, Dynamic(0)), StatusCode::kInvalidArgument,
                      "job 1 is DYNAMIC but has no split provider"));
  EXPECT_TRUE(Rejects(state, CreateJob(1, 1, Dynamic(100000)), StatusCode::kInvalidArgument,
                      "100000 split providers"));
  JobOptions off_with_providers;
  off_with_providers.num_split_providers = 2;
  EXPECT_TRUE(Rejects(state, CreateJob(1, 1, off_with_providers), StatusCode::kInvalidArgument,
                      "job 1 is OFF and cannot have 2 split providers"));
  JobOptions requeue_without_splits;
  requeue_without_splits.mode = ProcessingMode::DATA;
  requeue_without_splits.requeue_unfinished_splits = true;
  EXPECT_TRUE(Rejects(state, CreateJob(1, 1, requeue_without_splits), StatusCode::kInvalidArgument,
                      "job 1 is DATA and has no splits to requeue"));
}

TEST(DispatcherState, CreatingJobRejectsUnknownEnumValues) {
  DispatcherState state = WithDataset();
  OwnedUpdate mode = CreateJob(1, 1);
  mode.builder().getCreateJob().setProcessingMode(static_cast<ProcessingMode>(42));
  EXPECT_TRUE(Rejects(state, mode, StatusCode::kInvalidArgument, "unknown processing mode 42"));
  OwnedUpdate target = CreateJob(1, 1);
  target.builder().getCreateJob().setTargetWorkers(static_cast<TargetWorkers>(7));
  EXPECT_TRUE(Rejects(state, target, StatusCode::kInvalidArgument, "unknown target workers 7"));
}

TEST(DispatcherState, AcquiringJobClientCountsIt) {
  DispatcherState state = WithDataset();
  ASSERT_TRUE(Applies(state, CreateJob(1, 1)));
  ASSERT_TRUE(Applies(state, AcquireJobClient(10, 1).At(5)));
  ASSERT_TRUE(Applies(state, AcquireJobClient(11, 1).At(6)));
  EXPECT_EQ(state.FindJob(1)->num_clients, 2);
  ASSERT_EQ(state.ClientsForJob(1).size(), 2u);
  EXPECT_EQ(state.FindJobClient(11)->acquired_micros, 6);
  EXPECT_EQ(state.NextJobClientId(), 12u);
}

TEST(DispatcherState, AcquiringJobClientRejectsBadIdsAndUnknownJob) {
  DispatcherState state = WithDataset();
  EXPECT_TRUE(Rejects(state, AcquireJobClient(1, 4), StatusCode::kNotFound,
                      "job client 1 names unknown job 4"));
  ASSERT_TRUE(Applies(state, CreateJob(4, 1)));
  EXPECT_TRUE(
      Rejects(state, AcquireJobClient(0, 4), StatusCode::kInvalidArgument, "job client id 0"));
  ASSERT_TRUE(Applies(state, AcquireJobClient(3, 4)));
  EXPECT_TRUE(Rejects(state, AcquireJobClient(3, 4), StatusCode::kAlreadyExists,
                      "job client 3 already exists"));
  EXPECT_TRUE(
      Rejects(state, AcquireJobClient(2, 4), StatusCode::kInvalidArgument, "job client 2 reuses"));
}

TEST(DispatcherState, ReleasingJobClientRecordsTheReleaseTime) {
  DispatcherState state = WithDataset();
  ASSERT_TRUE(Applies(state, CreateJob(1, 1)));
  ASSERT_TRUE(Applies(state, AcquireJobClient(1, 1)));
  ASSERT_TRUE(Applies(state, ReleaseJobClient(1).At(1234)));
  EXPECT_EQ(state.FindJobClient(1), nullptr);
  EXPECT_EQ(state.FindJob(1)->num_clients, 0);
  EXPECT_EQ(state.FindJob(1)->last_client_released_micros, 1234);
  EXPECT_TRUE(state.ClientsForJob(1).empty());
  EXPECT_TRUE(
      Rejects(state, ReleaseJobClient(1), StatusCode::kNotFound, "job client 1 is unknown"));
}

TEST(DispatcherState, GarbageCollectingJobFinishesItsTasksAndDropsPendingOnes) {
  DispatcherState state = WithDataset();
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "b")));
  JobOptions round_robin;
  round_robin.num_consumers = 1;
  ASSERT_TRUE(Applies(state, CreateJob(1, 1, round_robin)));
  ASSERT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  ASSERT_TRUE(Applies(state, CreatePendingTask(2, 1, "b", 4)));
  ASSERT_TRUE(Applies(state, AcquireJobClient(1, 1)));
  ASSERT_TRUE(Applies(state, ReleaseJobClient(1)));
  ASSERT_TRUE(Applies(state, GarbageCollectJob(1)));
  const Job* job = state.FindJob(1);
  EXPECT_TRUE(job->garbage_collected);
  EXPECT_TRUE(job->finished);
  EXPECT_TRUE(state.FindTask(1)->finished);
  EXPECT_EQ(state.FindTask(2), nullptr);
  EXPECT_TRUE(state.PendingTasks(1).empty());
  EXPECT_TRUE(state.TasksForWorker("a").empty());
  EXPECT_TRUE(state.TasksForWorker("b").empty());
  EXPECT_TRUE(Rejects(state, AcquireJobClient(2, 1), StatusCode::kFailedPrecondition,
                      "job 1 has been garbage-collected"));
}

TEST(DispatcherState, GarbageCollectingJobRejectsJobsInUseOrNeverReleased) {
  DispatcherState state = WithDataset();
  EXPECT_TRUE(Rejects(state, GarbageCollectJob(1), StatusCode::kNotFound, "job 1 is unknown"));
  ASSERT_TRUE(Applies(state, CreateJob(1, 1)));
  EXPECT_TRUE(Rejects(state, GarbageCollectJob(1), StatusCode::kFailedPrecondition,
                      "never had a client released"));
  ASSERT_TRUE(Applies(state, AcquireJobClient(1, 1)));
  ASSERT_TRUE(Applies(state, AcquireJobClient(2, 1)));
  ASSERT_TRUE(Applies(state, ReleaseJobClient(1)));
  EXPECT_TRUE(Rejects(state, GarbageCollectJob(1), StatusCode::kFailedPrecondition,
                      "job 1 still has 1 clients"));
  ASSERT_TRUE(Applies(state, ReleaseJobClient(2)));
  ASSERT_TRUE(Applies(state, GarbageCollectJob(1)));
  EXPECT_TRUE(Rejects(state, GarbageCollectJob(1), StatusCode::kFailedPrecondition,
                      "job 1 is already finished"));
}

TEST(DispatcherState, NamedKeyPassesToNewJobAfterGarbageCollection) {
  DispatcherState state = WithDataset();
  ASSERT_TRUE(Applies(state, CreateJob(1, 1, Named("eval", 2))));
  ASSERT_TRUE(Applies(state, AcquireJobClient(1, 1)));
  ASSERT_TRUE(Applies(state, ReleaseJobClient(1)));
  ASSERT_TRUE(Applies(state, GarbageCollectJob(1)));
  ASSERT_TRUE(Applies(state, CreateJob(2, 1, Named("eval", 2))));
  EXPECT_EQ(state.FindNamedJob(NamedJobKey{"eval", 2})->id, 2u);
  EXPECT_TRUE(Rejects(state, CreateJob(3, 1, Named("eval", 2)), StatusCode::kAlreadyExists,
                      "held by job 2"));
}

}  // namespace
}  // namespace dispatch::state
