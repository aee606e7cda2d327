// CreateTask, CreatePendingTask, ClientHeartbeat, RemoveTask and FinishTask:
// what they change and each rejection.

#include <gtest/gtest.h>

#include "state/dispatcher_state.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

// A dataset, workers at "a" and "b", job 1 (OFF) and job 2 (round robin with
// two consumers, clients 1 and 2).
DispatcherState TwoWorkersTwoJobs() {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterDataset(1, 100)));
  EXPECT_TRUE(Applies(state, RegisterWorker(1, "a", "xa")));
  EXPECT_TRUE(Applies(state, RegisterWorker(2, "b", "xb")));
  EXPECT_TRUE(Applies(state, CreateJob(1, 1)));
  JobOptions round_robin;
  round_robin.num_consumers = 2;
  EXPECT_TRUE(Applies(state, CreateJob(2, 1, round_robin)));
  EXPECT_TRUE(Applies(state, AcquireJobClient(1, 2)));
  EXPECT_TRUE(Applies(state, AcquireJobClient(2, 2)));
  return state;
}

TEST(DispatcherState, CreatingTaskAssignsItToWorkerAndJob) {
  DispatcherState state = TwoWorkersTwoJobs();
  ASSERT_TRUE(Applies(state, CreateTask(5, 1, "a")));
  const Task* task = state.FindTask(5);
  ASSERT_NE(task, nullptr);
  EXPECT_EQ(task->job_id, 1u);
  EXPECT_EQ(task->worker_address, "a");
  EXPECT_EQ(task->transfer_address, "xa");
  EXPECT_EQ(task->starting_round, 0);
  EXPECT_FALSE(task->pending);
  EXPECT_FALSE(task->finished);
  ASSERT_EQ(state.TasksForWorker("a").size(), 1u);
  ASSERT_EQ(state.TasksForJob(1).size(), 1u);
  EXPECT_EQ(state.FindTaskForJobAndWorker(1, "a"), task);
  EXPECT_EQ(state.FindTaskForJobAndWorker(1, "b"), nullptr);
  EXPECT_EQ(state.NextTaskId(), 6u);
}

TEST(DispatcherState, CreatingTaskRejectsBadIdsUnknownJobAndSecondTaskOnWorker) {
  DispatcherState state = TwoWorkersTwoJobs();
  EXPECT_TRUE(Rejects(state, CreateTask(0, 1, "a"), StatusCode::kInvalidArgument, "task id 0"));
  EXPECT_TRUE(
      Rejects(state, CreateTask(1, 9, "a"), StatusCode::kNotFound, "task 1 names unknown job 9"));
  ASSERT_TRUE(Applies(state, CreateTask(3, 1, "a")));
  EXPECT_TRUE(
      Rejects(state, CreateTask(3, 1, "b"), StatusCode::kAlreadyExists, "task 3 already exists"));
  EXPECT_TRUE(Rejects(state, CreateTask(2, 1, "b"), StatusCode::kInvalidArgument, "task 2 reuses"));
  EXPECT_TRUE(Rejects(state, CreateTask(4, 1, "a"), StatusCode::kAlreadyExists,
                      "job 1 already has task 3 on worker address a"));
}

TEST(DispatcherState, CreatingTaskRejectsRemovedWorker) {
  DispatcherState state = TwoWorkersTwoJobs();
  ASSERT_TRUE(Applies(state, RemoveWorker(2)));
  EXPECT_TRUE(Rejects(state, CreateTask(1, 1, "b"), StatusCode::kFailedPrecondition,
                      "task 1 is for worker address b, where no worker is registered"));
}

TEST(DispatcherState, CreatingTaskRejectsFinishedJob) {
  DispatcherState state = TwoWorkersTwoJobs();
  ASSERT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  ASSERT_TRUE(Applies(state, FinishTask(1)));
  EXPECT_TRUE(Rejects(state, CreateTask(2, 1, "b"), StatusCode::kFailedPrecondition,
                      "task 2 is for finished job 1"));
}

TEST(DispatcherState, CreatingPendingTaskShowsItToTheWorkerButNotTheConsumers) {
  DispatcherState state = TwoWorkersTwoJobs();
  ASSERT_TRUE(Applies(state, CreatePendingTask(1, 2, "a", 7)));
  const Task* task = state.FindTask(1);
  ASSERT_NE(task, nullptr);
  EXPECT_TRUE(task->pending);
  EXPECT_EQ(task->starting_round, 7);
  EXPECT_EQ(state.TasksForWorker("a").size(), 1u);
  EXPECT_TRUE(state.TasksForJob(2).empty());
  ASSERT_EQ(state.PendingTasks(2).size(), 1u);
  EXPECT_EQ(state.PendingTasks(2)[0]->task_id, 1u);
  EXPECT_EQ(state.PendingTasks(2)[0]->target_round, 7);
  EXPECT_EQ(state.PendingTasks(2)[0]->failures, 0);
}

TEST(DispatcherState, CreatingPendingTaskRejectsJobWithoutRoundRobinAndNegativeRound) {
  DispatcherState state = TwoWorkersTwoJobs();
  EXPECT_TRUE(Rejects(state, CreatePendingTask(1, 1, "a", 0), StatusCode::kFailedPrecondition,
                      "pending task 1 is for job 1, which is not round robin"));
  EXPECT_TRUE(Rejects(state, CreatePendingTask(1, 2, "a", -1), StatusCode::kInvalidArgument,
                      "negative starting round"));
  ASSERT_TRUE(Applies(state, CreatePendingTask(1, 2, "a", 0)));
  EXPECT_TRUE(Rejects(state, CreatePendingTask(2, 2, "a", 0), StatusCode::kAlreadyExists,
                      "job 2 already has task 1"));
}

TEST(DispatcherState, PendingTaskAcceptedByEveryConsumerBecomesActiveAtTheTargetRound) {
  DispatcherState state = TwoWorkersTwoJobs();
  ASSERT_TRUE(Applies(state, CreatePendingTask(1, 2, "a", 5)));
  ASSERT_TRUE(Applies(state, AcceptPendingTask(1, 1)));
  EXPECT_TRUE(state.FindTask(1)->pending);
  EXPECT_EQ(state.PendingTasks(2)[0]->ready_clients.size(), 1u);
  ASSERT_TRUE(Applies(state, AcceptPendingTask(2, 1)));
  EXPECT_FALSE(state.FindTask(1)->pending);
  EXPECT_EQ(state.FindTask(1)->starting_round, 5);
  EXPECT_TRUE(state.PendingTasks(2).empty());
  ASSERT_EQ(state.TasksForJob(2).size(), 1u);
}

TEST(DispatcherState, RejectedPendingTaskMovesToTheNewRoundAndForgetsAcceptances) {
  DispatcherState state = TwoWorkersTwoJobs();
  ASSERT_TRUE(Applies(state, CreatePendingTask(1, 2, "a", 5)));
  ASSERT_TRUE(Applies(state, AcceptPendingTask(1, 1)));
  ASSERT_TRUE(Applies(state, RejectPendingTask(2, 1, 9)));
  const PendingTask* pending = state.PendingTasks(2)[0];
  EXPECT_EQ(pending->target_round, 9);
  EXPECT_EQ(pending->failures, 1);
  EXPECT_TRUE(pending->ready_clients.empty());
  ASSERT_TRUE(Applies(state, AcceptPendingTask(1, 1)));
  ASSERT_TRUE(Applies(state, AcceptPendingTask(2, 1)));
  EXPECT_EQ(state.FindTask(1)->starting_round, 9);
}

TEST(DispatcherState, ClientHeartbeatRejectsUnknownClientMissingOrWrongTaskAndRepeats) {
  DispatcherState state = TwoWorkersTwoJobs();
  EXPECT_TRUE(
      Rejects(state, AcceptPendingTask(9, 1), StatusCode::kNotFound, "job client 9 is unknown"));
  EXPECT_TRUE(Rejects(state, AcceptPendingTask(1, 1), StatusCode::kFailedPrecondition,
                      "job 2 has no pending task"));
  ASSERT_TRUE(Applies(state, CreatePendingTask(1, 2, "a", 5)));
  ASSERT_TRUE(Applies(state, CreatePendingTask(2, 2, "b", 5)));
  EXPECT_TRUE(Rejects(state, AcceptPendingTask(1, 2), StatusCode::kFailedPrecondition,
                      "task 2 is not the front pending task of job 2 (task 1 is)"));
  ASSERT_TRUE(Applies(state, AcceptPendingTask(1, 1)));
  EXPECT_TRUE(Rejects(state, AcceptPendingTask(1, 1), StatusCode::kAlreadyExists,
                      "job client 1 already accepted task 1"));
  EXPECT_TRUE(Rejects(state, RejectPendingTask(1, 1, 5), StatusCode::kInvalidArgument,
                      "new target round 5 of task 1 does not exceed its target round 5"));
}

TEST(DispatcherState, RemovingTaskForgetsIt) {
  DispatcherState state = TwoWorkersTwoJobs();
  ASSERT_TRUE(Applies(state, CreateTask(1, 2, "a")));
  ASSERT_TRUE(Applies(state, RemoveTask(1)));
  EXPECT_EQ(state.FindTask(1), nullptr);
  EXPECT_TRUE(state.TasksForWorker("a").empty());
  EXPECT_TRUE(state.TasksForJob(2).empty());
  // The worker may get a (pending) task of the job again.
  EXPECT_TRUE(Applies(state, CreatePendingTask(2, 2, "a", 3)));
}

TEST(DispatcherState, RemovingTaskRejectsUnknownPendingAndNonRoundRobinTasks) {
  DispatcherState state = TwoWorkersTwoJobs();
  EXPECT_TRUE(Rejects(state, RemoveTask(1), StatusCode::kNotFound, "task 1 is unknown"));
  ASSERT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  EXPECT_TRUE(Rejects(state, RemoveTask(1), StatusCode::kFailedPrecondition,
                      "task 1 belongs to job 1, which is not round robin"));
  ASSERT_TRUE(Applies(state, CreatePendingTask(2, 2, "a", 1)));
  EXPECT_TRUE(Rejects(state, RemoveTask(2), StatusCode::kFailedPrecondition, "task 2 is pending"));
}

TEST(DispatcherState, FinishingOneOfTwoTasksLeavesTheJobRunning) {
  DispatcherState state = TwoWorkersTwoJobs();
  ASSERT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  ASSERT_TRUE(Applies(state, CreateTask(2, 1, "b")));
  ASSERT_TRUE(Applies(state, FinishTask(1)));
  EXPECT_TRUE(state.FindTask(1)->finished);
  EXPECT_FALSE(state.FindJob(1)->finished);
  EXPECT_TRUE(state.TasksForWorker("a").empty());
  EXPECT_EQ(state.TasksForJob(1).size(), 2u);
}

TEST(DispatcherState, FinishingLastTaskFinishesJob) {
  DispatcherState state = TwoWorkersTwoJobs();
  ASSERT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  ASSERT_TRUE(Applies(state, CreateTask(2, 1, "b")));
  ASSERT_TRUE(Applies(state, FinishTask(2)));
  ASSERT_TRUE(Applies(state, FinishTask(1)));
  EXPECT_TRUE(state.FindJob(1)->finished);
  EXPECT_FALSE(state.FindJob(1)->garbage_collected);
  EXPECT_FALSE(state.FindJob(2)->finished);
}

TEST(DispatcherState, FinishingTaskRejectsUnknownPendingAndFinishedTasks) {
  DispatcherState state = TwoWorkersTwoJobs();
  EXPECT_TRUE(Rejects(state, FinishTask(1), StatusCode::kNotFound, "task 1 is unknown"));
  ASSERT_TRUE(Applies(state, CreatePendingTask(1, 2, "a", 1)));
  EXPECT_TRUE(Rejects(state, FinishTask(1), StatusCode::kFailedPrecondition, "task 1 is pending"));
  ASSERT_TRUE(Applies(state, CreateTask(2, 1, "a")));
  ASSERT_TRUE(Applies(state, CreateTask(3, 1, "b")));
  ASSERT_TRUE(Applies(state, FinishTask(2)));
  EXPECT_TRUE(
      Rejects(state, FinishTask(2), StatusCode::kFailedPrecondition, "task 2 is already finished"));
}

}  // namespace
}  // namespace dispatch::state
