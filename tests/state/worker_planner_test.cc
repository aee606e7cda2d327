// The workers' decisions (state/worker_planner.h) and the liveness they read
// (state/worker_liveness.h): registration, replacement of another process's
// registration, the tasks a worker attaching anew lacks (pending ones for
// round-robin jobs), the tasks to start and to delete, and workerUpdate's
// finished tasks. Every plan is applied to prove its Updates valid in order.

#include "state/worker_planner.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "state/dispatcher_state.h"
#include "state/soft_state.h"
#include "tests/state/planner_test_support.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

// Dataset 1 of kind "range", dataset 2 of kind "python", dataset 3 of none;
// OFF jobs 1, 2 and 3 of each; no worker.
DispatcherState ThreeJobs() {
  DispatcherState state;
  ApplyEach(state, RegisterDataset(1, 100, "", "", "range"),
            RegisterDataset(2, 200, "", "", "python"), RegisterDataset(3, 300), CreateJob(1, 1),
            CreateJob(2, 2), CreateJob(3, 3));
  return state;
}

// A heartbeat from "a" over connection 7, announcing the dataset kinds in
// `kinds` (a message that lives as long as the request).
struct Heartbeat {
  explicit Heartbeat(std::vector<std::string> kinds = {}, uint64_t incarnation = 1) {
    auto list = message.initRoot<capnp::AnyPointer>().initAs<capnp::List<capnp::Text>>(
        static_cast<unsigned>(kinds.size()));
    for (unsigned i = 0; i < kinds.size(); ++i) list.set(i, kinds[i]);
    request.address = "a";
    request.transfer_address = "xa";
    request.dataset_kinds = list.asReader();
    request.incarnation = incarnation;
    request.connection = 7;
  }
  capnp::MallocMessageBuilder message;
  WorkerHeartbeatRequest request;
};

// Plans the heartbeat, applies its Updates and its soft changes.
WorkerHeartbeatPlan Beat(DispatcherState& state, SoftState& soft,
                         const WorkerHeartbeatRequest& request, uint64_t now_ms = 10) {
  WorkerHeartbeatPlan plan = PlanWorkerHeartbeat(state, soft, request, now_ms, kStamp);
  EXPECT_TRUE(AppliesAll(state, plan.updates));
  soft.Apply(plan.soft);
  return plan;
}

TEST(WorkerPlanner, AFirstHeartbeatRegistersAndGetsATaskOfEveryJobItCanProduce) {
  DispatcherState state = ThreeJobs();
  SoftState soft;
  Heartbeat beat({"synthetic", "range", "range"});
  const WorkerHeartbeatPlan plan = Beat(state, soft, beat.request);
  EXPECT_TRUE(plan.registers);
  EXPECT_TRUE(plan.attaches);
  EXPECT_EQ(plan.replaces_worker_id, 0u);
  EXPECT_EQ(plan.worker_id, 1u);
  const Worker* worker = state.FindWorkerByAddress("a");
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(worker->transfer_address, "xa");
  EXPECT_EQ(std::vector<std::string>(worker->dataset_kinds.begin(), worker->dataset_kinds.end()),
            (std::vector<std::string>{"range", "synthetic"}));
  // Jobs 1 (range) and 3 (no kind), not 2 (python): tasks 1 and 2, both to start.
  EXPECT_EQ(plan.tasks_to_start, (IdList{1, 2}));
  EXPECT_EQ(state.FindTaskForJobAndWorker(1, "a")->id, 1u);
  EXPECT_EQ(state.FindTaskForJobAndWorker(3, "a")->id, 2u);
  EXPECT_EQ(state.FindTaskForJobAndWorker(2, "a"), nullptr);
  EXPECT_TRUE(soft.workers.IsConnected("a"));
}

TEST(WorkerPlanner, HeartbeatsOnTheSameLinkChangeNothingAndSayWhatToStartAndDelete) {
  DispatcherState state = ThreeJobs();
  SoftState soft;
  Heartbeat beat;
  Beat(state, soft, beat.request);
  const uint64_t digest = state.Digest();
  beat.request.current_tasks = {3, 99, 1, 99};
  const WorkerHeartbeatPlan plan = Beat(state, soft, beat.request, 20);
  EXPECT_FALSE(plan.registers);
  EXPECT_FALSE(plan.attaches);
  EXPECT_TRUE(plan.updates.empty());
  EXPECT_EQ(state.Digest(), digest);
  EXPECT_EQ(plan.tasks_to_start, (IdList{2}));
  EXPECT_EQ(plan.tasks_to_delete, (IdList{99}));
  EXPECT_EQ(soft.workers.LastHeartbeatMicros("a"), kStamp.time_micros);
}

TEST(WorkerPlanner, AttachingAnewCreatesTheTasksItLacksAndAStayingWorkerWaits) {
  DispatcherState state = ThreeJobs();
  SoftState soft;
  Heartbeat beat;
  Beat(state, soft, beat.request);
  ASSERT_TRUE(Applies(state, CreateJob(4, 3)));  // no task on "a" yet
  EXPECT_TRUE(PlanWorkerHeartbeat(state, soft, beat.request, 20, kStamp).updates.empty());
  beat.request.connection = 8;  // reconnected
  const WorkerHeartbeatPlan plan = Beat(state, soft, beat.request, 30);
  EXPECT_TRUE(plan.attaches);
  EXPECT_EQ(plan.tasks_to_start, (IdList{1, 2, 3, 4}));
  EXPECT_EQ(state.FindTaskForJobAndWorker(4, "a")->id, 4u);
  EXPECT_EQ(soft.workers.ConnectionOf("a"), 8u);
}

TEST(WorkerPlanner, ARoundRobinJobGetsAPendingTaskAfterItsConsumersFurthestRound) {
  DispatcherState state;
  SoftState soft;
  JobOptions round_robin;
  round_robin.num_consumers = 2;
  ApplyEach(state, RegisterDataset(1, 100), CreateJob(1, 1, round_robin), AcquireJobClient(1, 1),
            AcquireJobClient(2, 1));
  soft.consumers.Heard(1, 7, 0, 0);
  soft.consumers.Heard(2, 4, 0, 0);
  Heartbeat beat;
  const WorkerHeartbeatPlan plan = Beat(state, soft, beat.request);
  const Task* task = state.FindTaskForJobAndWorker(1, "a");
  ASSERT_NE(task, nullptr);
  EXPECT_TRUE(task->pending);
  EXPECT_EQ(task->starting_round, 8);
  EXPECT_EQ(plan.tasks_to_start, (IdList{task->id}));  // workers hear of pending tasks too
}

TEST(WorkerPlanner, ANewProcessAtTheAddressReplacesTheOldRegistrationOnceRemoved) {
  DispatcherState state = ThreeJobs();
  SoftState soft;
  Heartbeat first({}, /*incarnation=*/11);
  Beat(state, soft, first.request);
  Heartbeat unsaid({}, /*incarnation=*/0);
  EXPECT_EQ(PlanWorkerHeartbeat(state, soft, unsaid.request, 20, kStamp).replaces_worker_id, 0u);

  Heartbeat second({"range"}, /*incarnation=*/12);
  WorkerHeartbeatPlan plan = PlanWorkerHeartbeat(state, soft, second.request, 20, kStamp);
  EXPECT_EQ(plan.replaces_worker_id, 1u);
  EXPECT_TRUE(plan.registers);
  ASSERT_EQ(plan.updates.size(), 1u);  // the registration alone, to size it
  EXPECT_EQ(plan.updates[0].getRegisterWorker().getWorkerId(), 2u);
  // The caller removes the old worker, then plans again.
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  soft.workers.Forget("a");
  plan = Beat(state, soft, second.request, 30);
  EXPECT_EQ(plan.replaces_worker_id, 0u);
  EXPECT_TRUE(plan.registers);
  EXPECT_EQ(plan.worker_id, 2u);
  EXPECT_EQ(state.FindWorkerByAddress("a")->incarnation, 12u);
  // Its tasks stayed with the address: none is created again.
  EXPECT_EQ(plan.updates.size(), 1u);
  EXPECT_EQ(plan.tasks_to_start, (IdList{1, 2, 3}));
}

TEST(WorkerPlanner, WorkerUpdateFinishesEachCompletedTaskOnceAndRefusesUnknownOnes) {
  DispatcherState state = ThreeJobs();
  SoftState soft;
  Heartbeat beat;
  Beat(state, soft, beat.request);  // tasks 1, 2, 3
  ASSERT_TRUE(Applies(state, FinishTask(2)));
  Result<UpdateList> updates =
      PlanWorkerUpdate(state, {{1, true}, {2, true}, {3, false}, {1, true}}, kStamp);
  ASSERT_TRUE(updates.ok());
  ASSERT_EQ(updates->size(), 1u);
  EXPECT_EQ((*updates)[0].getFinishTask().getTaskId(), 1u);
  ASSERT_TRUE(AppliesAll(state, *updates));
  const Status unknown = PlanWorkerUpdate(state, {{3, true}, {42, true}}, kStamp).status();
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.message(), "task 42 is unknown");
}

TEST(WorkerPlanner, APendingTaskIsNotFinishedForItsConsumers) {
  DispatcherState state;
  JobOptions round_robin;
  round_robin.num_consumers = 1;
  ApplyEach(state, RegisterDataset(1, 100), RegisterWorker(1, "a"), CreateJob(1, 1, round_robin),
            CreatePendingTask(1, 1, "a", 3));
  Result<UpdateList> updates = PlanWorkerUpdate(state, {{1, true}}, kStamp);
  ASSERT_TRUE(updates.ok());
  EXPECT_TRUE(updates->empty());
}

TEST(WorkerPlanner, ARemovalPutsItsClosuresBackThenRemovesTheWorkerKeepingItsTasks) {
  DispatcherState state = ThreeJobs();
  ApplyEach(state, RegisterWorker(1, "a"), CreateTask(1, 1, "a"), ScheduleClosure(1, 7),
            AssignClosure(1, 1, 1));
  ClosurePolicy policy;
  EXPECT_TRUE(PlanWorkerRemoval(state, policy, 2, "gone", 500, kStamp).updates.empty());
  WorkerRemovalPlan plan = PlanWorkerRemoval(state, policy, 1, "its connection dropped", 500, kStamp);
  ASSERT_EQ(plan.updates.size(), 2u);
  EXPECT_EQ(plan.updates[1].which(), journal::Update::REMOVE_WORKER);
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  EXPECT_EQ(state.FindWorker(1), nullptr);
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::QUEUED);
  EXPECT_EQ(state.TasksForWorker("a").size(), 1u);
  // Its address keeps the task for the grace period, from now.
  ASSERT_TRUE(plan.soft.address_gone.has_value());
  EXPECT_EQ(plan.soft.address_gone->address, "a");
  EXPECT_EQ(plan.soft.address_gone->now_ms, 500u);
}

TEST(WorkerPlanner, AWorkerWithoutTasksLeavesNoAbsenceBehind) {
  DispatcherState state;
  ApplyEach(state, RegisterWorker(1, "a"));
  WorkerRemovalPlan plan = PlanWorkerRemoval(state, ClosurePolicy(), 1, "gone", 500, kStamp);
  ASSERT_EQ(plan.updates.size(), 1u);
  EXPECT_FALSE(plan.soft.address_gone.has_value());
}

TEST(WorkerLiveness, ADroppedConnectionDetachesItsWorkersAndTimeoutsUseTheServingClock) {
  DispatcherState state = ThreeJobs();
  ApplyEach(state, RegisterWorker(1, "a"), RegisterWorker(2, "b"));
  WorkerLiveness liveness;
  liveness.Initialize(state, 100);
  EXPECT_FALSE(liveness.IsConnected("a"));
  EXPECT_TRUE(liveness.WouldAttach("a", 1, 7));
  EXPECT_TRUE(liveness.Heard("a", 1, 7, 150, 5));
  EXPECT_FALSE(liveness.Heard("a", 1, 7, 160, 6));
  EXPECT_TRUE(liveness.WouldAttach("a", 3, 7));  // another registration
  EXPECT_TRUE(liveness.Heard("b", 2, 7, 160, 6));
  EXPECT_EQ(liveness.TimedOut(400, 250), (std::vector<std::string>{}));
  EXPECT_EQ(liveness.TimedOut(411, 250), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(liveness.Detach(7), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(liveness.IsConnected("a"));
  EXPECT_TRUE(liveness.Detach(7).empty());
  liveness.Forget("a");
  EXPECT_EQ(liveness.LastHeartbeatMicros("a"), 0);
  EXPECT_EQ(liveness.LastHeartbeatMicros("b"), 6);
}

}  // namespace
}  // namespace dispatch::state
