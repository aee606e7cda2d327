#include "state/worker_planner.h"

#include <algorithm>
#include <set>
#include <string>

#include "state/bytes.h"
#include "state/task_routing.h"

namespace dispatch::state {
namespace {

// The registration a heartbeat makes: its record (for routing its tasks
// before it is applied) and its RegisterWorker.
Worker AddRegistration(UpdateList& out, const DispatcherState& state,
                       const WorkerHeartbeatRequest& request, const Stamp& stamp) {
  Worker worker;
  worker.id = state.NextWorkerId();
  worker.address = request.address;
  worker.incarnation = request.incarnation;
  // Sorted and unique, as the state keeps them (the journal says so too).
  for (auto kind : request.dataset_kinds) worker.dataset_kinds.emplace(ToView(kind));
  auto reg = out.Add(stamp.time_micros).initRegisterWorker();
  reg.setWorkerId(worker.id);
  reg.setAddress(request.address);
  reg.setTransferAddress(request.transfer_address);
  reg.setTags(request.tags);
  reg.setIncarnation(request.incarnation);
  auto kinds = reg.initDatasetKinds(static_cast<unsigned>(worker.dataset_kinds.size()));
  unsigned k = 0;
  for (const std::string& kind : worker.dataset_kinds) kinds.set(k++, kind);
  return worker;
}

}  // namespace

WorkerHeartbeatPlan PlanWorkerHeartbeat(const DispatcherState& state, const SoftState& soft,
                                        const WorkerHeartbeatRequest& request, uint64_t now_ms,
                                        const Stamp& stamp) {
  WorkerHeartbeatPlan plan;
  const Worker* worker = state.FindWorkerByAddress(request.address);
  const bool replaced =
      worker != nullptr && request.incarnation != 0 && worker->incarnation != request.incarnation;
  Worker registration;
  if (worker == nullptr || replaced) {
    plan.registers = true;
    registration = AddRegistration(plan.updates, state, request, stamp);
    plan.worker_id = registration.id;
    if (replaced) {
      // Another process at this address: the old one is gone.
      plan.replaces_worker_id = worker->id;
      return plan;
    }
    worker = &registration;
  }
  plan.worker_id = worker->id;
  plan.attaches = soft.workers.WouldAttach(request.address, worker->id, request.connection);
  plan.soft.worker_heard = SoftChanges::WorkerHeard{request.address, worker->id, request.connection,
                                                    now_ms, stamp.time_micros};

  // Tasks for every unfinished job it lacks (pending for round robin).
  std::vector<uint64_t> created;
  if (plan.registers || plan.attaches) {
    uint64_t task_id = state.NextTaskId();
    const capnp::Text::Reader address = AsText(request.address);
    for (const uint64_t job_id : JobsNeedingTask(state, *worker)) {
      if (state.FindJob(job_id)->IsRoundRobin()) {
        // Consumers agree on a round after the furthest any of them reported.
        auto create = plan.updates.Add(stamp.time_micros).initCreatePendingTask();
        create.setTaskId(task_id);
        create.setJobId(job_id);
        create.setWorkerAddress(address);
        create.setStartingRound(soft.consumers.JobRound(state, job_id) + 1);
      } else {
        auto create = plan.updates.Add(stamp.time_micros).initCreateTask();
        create.setTaskId(task_id);
        create.setJobId(job_id);
        create.setWorkerAddress(address);
      }
      created.push_back(task_id++);
    }
  }

  // What to start and what to delete, with sorted vectors rather than sets:
  // a worker runs a handful of tasks and this runs on every heartbeat. The
  // tasks created above have the largest ids: they come last.
  std::vector<uint64_t> current = request.current_tasks;
  std::sort(current.begin(), current.end());
  current.erase(std::unique(current.begin(), current.end()), current.end());
  std::vector<uint64_t> assigned;
  for (const Task* task : state.TasksForWorker(request.address)) assigned.push_back(task->id);
  assigned.insert(assigned.end(), created.begin(), created.end());
  for (uint64_t id : assigned) {
    if (!std::binary_search(current.begin(), current.end(), id)) plan.tasks_to_start.push_back(id);
  }
  for (uint64_t id : current) {
    if (!std::binary_search(assigned.begin(), assigned.end(), id))
      plan.tasks_to_delete.push_back(id);
  }
  return plan;
}

Result<UpdateList> PlanWorkerUpdate(const DispatcherState& state,
                                    const std::vector<TaskProgress>& progress, const Stamp& stamp) {
  // Every entry is validated before anything is planned.
  std::vector<uint64_t> to_finish;
  for (const TaskProgress& entry : progress) {
    Result<const Task*> task = state.GetTask(entry.task_id);
    if (!task.ok()) return task.status();
    if (!entry.completed || (*task)->finished || (*task)->pending) continue;
    to_finish.push_back(entry.task_id);
  }
  UpdateList updates;
  std::set<uint64_t> planned;  // a task listed twice is finished once
  for (uint64_t task_id : to_finish) {
    if (!planned.insert(task_id).second) continue;
    updates.Add(stamp.time_micros).initFinishTask().setTaskId(task_id);
  }
  return updates;
}

WorkerRemovalPlan PlanWorkerRemoval(const DispatcherState& state, const ClosurePolicy& policy,
                                    uint64_t worker_id, std::string_view reason, uint64_t now_ms,
                                    const Stamp& stamp) {
  WorkerRemovalPlan plan;
  const Worker* worker = state.FindWorker(worker_id);
  if (worker == nullptr) return plan;
  // RemoveWorker requires a worker without closures: they leave it first.
  plan.updates = PlanWorkerLost(state, policy, worker_id, reason, stamp);
  plan.updates.Add(stamp.time_micros).initRemoveWorker().setWorkerId(worker_id);
  if (!state.TasksForWorker(worker->address).empty())
    plan.soft.address_gone = SoftChanges::AddressGone{worker->address, now_ms};
  return plan;
}

}  // namespace dispatch::state
