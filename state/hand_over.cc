// HandOverTask: a task whose worker is gone for good (no worker at its
// address for the grace period, the planner's judgement: hand_over_planner.h)
// is finished on that worker's behalf. DYNAMIC: the splits it still holds go
// back to the requeue list when the job requeues, in whatever repetition the
// provider is at; OFF: its stream ends where it stopped. Static sharding and
// round robin are refused: their tasks still wait for their address.

#include <string>

#include "state/data_policy.h"
#include "state/dispatcher_state.h"

namespace dispatch::state {

Status DispatcherState::CheckHandOverTask(journal::HandOverTask::Reader u) const {
  const std::string name = "task " + std::to_string(u.getTaskId());
  const Task* task = FindTask(u.getTaskId());
  if (task == nullptr) return NotFoundError(name + " is unknown");
  if (task->finished) return FailedPreconditionError(name + " is already finished");
  if (task->pending) {
    return FailedPreconditionError(name +
                                   " is a pending round-robin task: it cannot be handed over");
  }
  if (const Worker* worker = FindWorkerByAddress(task->worker_address)) {
    return FailedPreconditionError(name + " cannot be handed over: worker " +
                                   std::to_string(worker->id) + " is registered at its address " +
                                   task->worker_address);
  }
  const Job& job = jobs_.at(task->job_id);
  if (job.IsRoundRobin()) {
    return FailedPreconditionError(name + " belongs to round-robin job " + std::to_string(job.id) +
                                   ": its tasks are not handed over (they wait for their address)");
  }
  if (!HandsOverTasks(job)) {
    return FailedPreconditionError(name + " belongs to job " + std::to_string(job.id) +
                                   ", which is " + ProcessingModeName(job.processing_mode) +
                                   ": only DYNAMIC and OFF tasks are handed over (the others wait "
                                   "for their address)");
  }
  return Status::Ok();
}

void DispatcherState::ApplyHandOverTask(journal::HandOverTask::Reader u) {
  Task& task = tasks_.at(u.getTaskId());
  // Before the finish, which counts what is still outstanding as consumed.
  RequeueOutstandingSplits(task, /*any_repetition=*/true);
  FinishTaskAndMaybeJob(task);
}

}  // namespace dispatch::state
