#include "state/hand_over_planner.h"

namespace dispatch::state {

TaskHandOverPlan PlanTaskHandOvers(const DispatcherState& state, const SoftState& soft,
                                   uint64_t now_ms, const DataPolicy& policy, const Stamp& stamp) {
  TaskHandOverPlan plan;
  for (const auto& [address, since_ms] : soft.absence.since_ms()) {
    const std::vector<const Task*> tasks = state.TasksForWorker(address);
    if (tasks.empty() || state.FindWorkerByAddress(address) != nullptr) {
      plan.soft.absences_forgotten.push_back(address);
      continue;
    }
    // Within the grace period the worker may come back and keep its tasks.
    if (now_ms < since_ms || now_ms - since_ms < policy.worker_grace_ms) continue;
    for (const Task* task : tasks) {
      if (task->pending || !HandsOverTasks(*state.FindJob(task->job_id))) continue;
      plan.updates.Add(stamp.time_micros).initHandOverTask().setTaskId(task->id);
      plan.task_ids.push_back(task->id);
      plan.addresses.push_back(address);
    }
  }
  return plan;
}

}  // namespace dispatch::state
