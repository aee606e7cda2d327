// The hand-over planner (state/hand_over_planner.h) and the absences it
// reads (state/worker_absence.h): a removed worker's address keeps its tasks
// for the grace period, a worker back there keeps them, past it DYNAMIC and
// OFF tasks are handed over and the others wait; a restart starts every
// absence's grace anew. Every plan is applied to prove its Updates valid.

#include "state/hand_over_planner.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "state/dispatcher_state.h"
#include "state/soft_state.h"
#include "state/worker_planner.h"
#include "tests/state/planner_test_support.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

constexpr uint64_t kGraceMs = 1000;

DataPolicy Policy(uint64_t grace_ms = kGraceMs) {
  DataPolicy policy;
  policy.worker_grace_ms = grace_ms;
  return policy;
}

// Workers 1 at "a" and 2 at "b". Job 1 DYNAMIC, job 2 OFF, job 3 FILE,
// job 4 OFF round robin; each has a task on "a" (tasks 1 to 4) and job 1
// one on "b" (task 5).
DispatcherState FourJobs() {
  DispatcherState state;
  JobOptions dynamic;
  dynamic.mode = ProcessingMode::DYNAMIC;
  dynamic.num_split_providers = 1;
  JobOptions file;
  file.mode = ProcessingMode::FILE;
  JobOptions round_robin;
  round_robin.num_consumers = 1;
  ApplyEach(state, RegisterDataset(1, 100), RegisterWorker(1, "a"), RegisterWorker(2, "b"),
            CreateJob(1, 1, dynamic), CreateJob(2, 1), CreateJob(3, 1, file),
            CreateJob(4, 1, round_robin), CreateTask(1, 1, "a"), CreateTask(2, 2, "a"),
            CreateTask(3, 3, "a"), CreateTask(4, 4, "a"), CreateTask(5, 1, "b"));
  return state;
}

// Removes the worker with `worker_id` at `now_ms` as the reactor does:
// carries the plan and applies its soft changes.
void Remove(DispatcherState& state, SoftState& soft, uint64_t worker_id, uint64_t now_ms) {
  WorkerRemovalPlan plan =
      PlanWorkerRemoval(state, ClosurePolicy(), worker_id, "gone", now_ms, kStamp);
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  soft.Apply(plan.soft);
}

TEST(HandOverPlanner, NothingIsHandedOverWithinTheGracePeriod) {
  DispatcherState state = FourJobs();
  SoftState soft;
  soft.Initialize(state, 0, 0);
  EXPECT_TRUE(soft.absence.since_ms().empty());
  Remove(state, soft, 1, 100);
  ASSERT_EQ(soft.absence.since_ms().size(), 1u);
  EXPECT_EQ(soft.absence.since_ms().at("a"), 100u);
  TaskHandOverPlan plan = PlanTaskHandOvers(state, soft, 100 + kGraceMs - 1, Policy(), kStamp);
  EXPECT_TRUE(plan.updates.empty());
  EXPECT_TRUE(plan.soft.empty());
}

TEST(HandOverPlanner, PastTheGraceDynamicAndOffTasksAreHandedOverAndTheOthersWait) {
  DispatcherState state = FourJobs();
  SoftState soft;
  soft.Initialize(state, 0, 0);
  Remove(state, soft, 1, 100);
  TaskHandOverPlan plan = PlanTaskHandOvers(state, soft, 100 + kGraceMs, Policy(), kStamp);
  EXPECT_EQ(plan.task_ids, (IdList{1, 2}));
  EXPECT_EQ(plan.addresses, (std::vector<std::string>{"a", "a"}));
  ASSERT_EQ(plan.updates.size(), 2u);
  EXPECT_EQ(plan.updates[0].which(), journal::Update::HAND_OVER_TASK);
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  soft.Apply(plan.soft);
  EXPECT_TRUE(state.FindTask(1)->finished);
  EXPECT_TRUE(state.FindTask(2)->finished);
  EXPECT_TRUE(state.FindJob(2)->finished);   // OFF: its only task
  EXPECT_FALSE(state.FindJob(1)->finished);  // task 5 on "b" still runs
  // FILE and round robin wait for their address, absent still.
  EXPECT_FALSE(state.FindTask(3)->finished);
  EXPECT_FALSE(state.FindTask(4)->finished);
  EXPECT_TRUE(soft.absence.since_ms().contains("a"));
  EXPECT_TRUE(PlanTaskHandOvers(state, soft, 100 + 5 * kGraceMs, Policy(), kStamp).updates.empty());
}

TEST(HandOverPlanner, AGraceOfZeroHandsOverAtTheRemoval) {
  DispatcherState state = FourJobs();
  SoftState soft;
  soft.Initialize(state, 0, 0);
  Remove(state, soft, 2, 100);
  TaskHandOverPlan plan = PlanTaskHandOvers(state, soft, 100, Policy(0), kStamp);
  EXPECT_EQ(plan.task_ids, (IdList{5}));
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  soft.Apply(plan.soft);
  // Nothing left at "b": the next plan forgets the absence.
  TaskHandOverPlan after = PlanTaskHandOvers(state, soft, 100, Policy(0), kStamp);
  EXPECT_TRUE(after.updates.empty());
  EXPECT_EQ(after.soft.absences_forgotten, (std::vector<std::string>{"b"}));
  soft.Apply(after.soft);
  EXPECT_TRUE(soft.absence.since_ms().empty());
}

TEST(HandOverPlanner, AWorkerBackAtTheAddressInTimeKeepsItsTasks) {
  DispatcherState state = FourJobs();
  SoftState soft;
  soft.Initialize(state, 0, 0);
  Remove(state, soft, 1, 100);
  // A new process registers at "a" and heartbeats before the grace ends.
  ASSERT_TRUE(Applies(state, RegisterWorker(3, "a")));
  SoftChanges heard;
  heard.worker_heard = SoftChanges::WorkerHeard{"a", 3, 9, 500, 0};
  soft.Apply(heard);
  EXPECT_TRUE(soft.absence.since_ms().empty());
  EXPECT_TRUE(PlanTaskHandOvers(state, soft, 100 + 5 * kGraceMs, Policy(), kStamp).updates.empty());
  // Registered but not heard from yet (between its registration and the
  // soft state's update): nothing is planned, and the absence is over.
  Remove(state, soft, 3, 200);
  ASSERT_TRUE(Applies(state, RegisterWorker(4, "a")));
  TaskHandOverPlan plan = PlanTaskHandOvers(state, soft, 200 + kGraceMs, Policy(), kStamp);
  EXPECT_TRUE(plan.updates.empty());
  EXPECT_EQ(plan.soft.absences_forgotten, (std::vector<std::string>{"a"}));
}

TEST(HandOverPlanner, ARestartStartsEveryAbsencesGraceAnew) {
  DispatcherState state = FourJobs();
  SoftState soft;
  soft.Initialize(state, 0, 0);
  Remove(state, soft, 1, 100);
  // The dispatcher restarts at 5000 (its serving clock anew): "a" has
  // unfinished tasks and no worker, "b" has a worker.
  SoftState restarted;
  restarted.Initialize(state, 5000, 0);
  ASSERT_EQ(restarted.absence.since_ms().size(), 1u);
  EXPECT_EQ(restarted.absence.since_ms().at("a"), 5000u);
  EXPECT_TRUE(
      PlanTaskHandOvers(state, restarted, 5000 + kGraceMs - 1, Policy(), kStamp).updates.empty());
  EXPECT_EQ(PlanTaskHandOvers(state, restarted, 5000 + kGraceMs, Policy(), kStamp).task_ids,
            (IdList{1, 2}));
}

TEST(HandOverPlanner, ARemovalKeepsTheEarlierTimeOfAnAddressAlreadyAbsent) {
  WorkerAbsence absence;
  absence.Gone("a", 100);
  absence.Gone("a", 300);
  EXPECT_EQ(absence.since_ms().at("a"), 100u);
  absence.Forget("a");
  absence.Forget("z");  // unknown: nothing to do
  EXPECT_TRUE(absence.since_ms().empty());
}

}  // namespace
}  // namespace dispatch::state
