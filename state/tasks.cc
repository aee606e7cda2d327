// Tasks: one per (job, worker address). Active tasks are seen by consumers;
// pending tasks of round-robin jobs wait in their job's queue until every
// consumer accepts them at a common round. A job finishes when all its active
// tasks have finished.

#include <cstdint>
#include <string>

#include "state/bytes.h"
#include "state/dispatcher_state.h"
#include "state/index_util.h"
#include "state/task_routing.h"

namespace dispatch::state {

namespace {
std::string TaskName(uint64_t id) { return "task " + std::to_string(id); }
std::string JobName(uint64_t id) { return "job " + std::to_string(id); }
}  // namespace

Status DispatcherState::CheckNewTask(uint64_t task_id, uint64_t job_id,
                                     std::string_view address) const {
  if (task_id == 0) return InvalidArgumentError("task id 0 is reserved");
  if (task_id == UINT64_MAX) {
    return InvalidArgumentError("task id " + std::to_string(task_id) +
                                " is the largest: the next task id would wrap to 0");
  }
  if (tasks_.contains(task_id)) return AlreadyExistsError(TaskName(task_id) + " already exists");
  if (task_id < next_task_id_) {
    return InvalidArgumentError(TaskName(task_id) + " reuses an id below the next task id " +
                                std::to_string(next_task_id_));
  }
  const Job* job = FindJob(job_id);
  if (job == nullptr)
    return NotFoundError(TaskName(task_id) + " names unknown job " + std::to_string(job_id));
  if (job->finished)
    return FailedPreconditionError(TaskName(task_id) + " is for finished " + JobName(job_id));
  if (FindWorkerByAddress(address) == nullptr) {
    return FailedPreconditionError(TaskName(task_id) + " is for worker address " +
                                   std::string(address) + ", where no worker is registered");
  }
  const Task* existing = FindTaskForJobAndWorker(job_id, address);
  if (existing != nullptr) {
    return AlreadyExistsError(JobName(job_id) + " already has " + TaskName(existing->id) +
                              " on worker address " + std::string(address));
  }
  const Dataset* dataset = FindDataset(job->dataset_id);
  if (dataset != nullptr && !CanProduce(*FindWorkerByAddress(address), *dataset)) {
    return FailedPreconditionError(TaskName(task_id) + " is for worker address " +
                                   std::string(address) + ", which announces no dataset kind '" +
                                   dataset->kind + "' (" + JobName(job_id) + " reads dataset " +
                                   std::to_string(dataset->id) + ")");
  }
  return Status::Ok();
}

Status DispatcherState::CheckCreateTask(journal::CreateTask::Reader u) const {
  return CheckNewTask(u.getTaskId(), u.getJobId(), ToView(u.getWorkerAddress()));
}

void DispatcherState::ApplyCreateTask(journal::CreateTask::Reader u) {
  Task task;
  task.id = u.getTaskId();
  task.job_id = u.getJobId();
  task.worker_address = ToString(u.getWorkerAddress());
  task.transfer_address = FindWorkerByAddress(task.worker_address)->transfer_address;
  AddToIndex(indexes_.tasks_by_worker, task.worker_address, task.id);
  AddToIndex(indexes_.tasks_by_job, task.job_id, task.id);
  indexes_.task_by_job_worker.emplace(std::make_pair(task.job_id, task.worker_address), task.id);
  next_task_id_ = task.id + 1;
  if (effects_ != nullptr) effects_->tasks_created.push_back(task.id);
  tasks_.emplace(task.id, std::move(task));
}

Status DispatcherState::CheckCreatePendingTask(journal::CreatePendingTask::Reader u) const {
  DISPATCH_RETURN_IF_ERROR(CheckNewTask(u.getTaskId(), u.getJobId(), ToView(u.getWorkerAddress())));
  if (!FindJob(u.getJobId())->IsRoundRobin()) {
    return FailedPreconditionError("pending " + TaskName(u.getTaskId()) + " is for " +
                                   JobName(u.getJobId()) + ", which is not round robin");
  }
  if (u.getStartingRound() < 0) {
    return InvalidArgumentError("pending " + TaskName(u.getTaskId()) +
                                " has negative starting round " +
                                std::to_string(u.getStartingRound()));
  }
  return Status::Ok();
}

void DispatcherState::ApplyCreatePendingTask(journal::CreatePendingTask::Reader u) {
  Task task;
  task.id = u.getTaskId();
  task.job_id = u.getJobId();
  task.worker_address = ToString(u.getWorkerAddress());
  task.transfer_address = FindWorkerByAddress(task.worker_address)->transfer_address;
  task.starting_round = u.getStartingRound();
  task.pending = true;
  AddToIndex(indexes_.tasks_by_worker, task.worker_address, task.id);
  indexes_.task_by_job_worker.emplace(std::make_pair(task.job_id, task.worker_address), task.id);
  PendingTask pending;
  pending.task_id = task.id;
  pending.target_round = task.starting_round;
  jobs_.at(task.job_id).pending_tasks.push_back(std::move(pending));
  next_task_id_ = task.id + 1;
  if (effects_ != nullptr) effects_->tasks_created.push_back(task.id);
  tasks_.emplace(task.id, std::move(task));
}

Status DispatcherState::CheckClientHeartbeat(journal::ClientHeartbeat::Reader u) const {
  const JobClient* client = FindJobClient(u.getJobClientId());
  if (client == nullptr)
    return NotFoundError("job client " + std::to_string(u.getJobClientId()) + " is unknown");
  const Job& job = jobs_.at(client->job_id);
  if (job.pending_tasks.empty()) {
    return FailedPreconditionError(JobName(job.id) + " has no pending task (heartbeat names " +
                                   TaskName(u.getTaskId()) + ")");
  }
  const PendingTask& front = job.pending_tasks.front();
  if (front.task_id != u.getTaskId()) {
    return FailedPreconditionError(TaskName(u.getTaskId()) + " is not the front pending task of " +
                                   JobName(job.id) + " (" + TaskName(front.task_id) + " is)");
  }
  switch (u.getOutcome().which()) {
    case journal::ClientHeartbeat::Outcome::ACCEPTED:
      if (front.ready_clients.contains(client->id)) {
        return AlreadyExistsError("job client " + std::to_string(client->id) +
                                  " already accepted " + TaskName(front.task_id) + " at round " +
                                  std::to_string(front.target_round));
      }
      return Status::Ok();
    case journal::ClientHeartbeat::Outcome::REJECTED:
      if (u.getOutcome().getRejected() <= front.target_round) {
        return InvalidArgumentError("new target round " +
                                    std::to_string(u.getOutcome().getRejected()) + " of " +
                                    TaskName(front.task_id) + " does not exceed its target round " +
                                    std::to_string(front.target_round));
      }
      return Status::Ok();
  }
  return InvalidArgumentError("client heartbeat for " + TaskName(front.task_id) +
                              " has an unknown outcome");
}

void DispatcherState::ApplyClientHeartbeat(journal::ClientHeartbeat::Reader u) {
  Job& job = jobs_.at(job_clients_.at(u.getJobClientId()).job_id);
  PendingTask& front = job.pending_tasks.front();
  if (u.getOutcome().isRejected()) {
    front.target_round = u.getOutcome().getRejected();
    front.failures += 1;
    front.ready_clients.clear();
    return;
  }
  front.ready_clients.insert(u.getJobClientId());
  if (front.ready_clients.size() < job.num_consumers) return;
  Task& task = tasks_.at(front.task_id);
  task.pending = false;
  task.starting_round = front.target_round;
  AddToIndex(indexes_.tasks_by_job, task.job_id, task.id);
  job.pending_tasks.pop_front();
  if (effects_ != nullptr) effects_->tasks_activated.push_back(task.id);
}

Status DispatcherState::CheckRemoveTask(journal::RemoveTask::Reader u) const {
  const Task* task = FindTask(u.getTaskId());
  if (task == nullptr) return NotFoundError(TaskName(u.getTaskId()) + " is unknown");
  if (task->pending) return FailedPreconditionError(TaskName(task->id) + " is pending");
  if (!jobs_.at(task->job_id).IsRoundRobin()) {
    return FailedPreconditionError(TaskName(task->id) + " belongs to " + JobName(task->job_id) +
                                   ", which is not round robin");
  }
  return Status::Ok();
}

void DispatcherState::ApplyRemoveTask(journal::RemoveTask::Reader u) {
  const Task& task = tasks_.at(u.getTaskId());
  RemoveFromIndex(indexes_.tasks_by_worker, task.worker_address, task.id);
  RemoveFromIndex(indexes_.tasks_by_job, task.job_id, task.id);
  indexes_.task_by_job_worker.erase(std::make_pair(task.job_id, task.worker_address));
  split_grants_.erase(split_grants_.lower_bound(SplitRequester{task.id, 0}),
                      split_grants_.upper_bound(SplitRequester{task.id, UINT32_MAX}));
  tasks_.erase(u.getTaskId());
  if (effects_ != nullptr) effects_->tasks_removed.push_back(u.getTaskId());
}

Status DispatcherState::CheckFinishTask(journal::FinishTask::Reader u) const {
  const Task* task = FindTask(u.getTaskId());
  if (task == nullptr) return NotFoundError(TaskName(u.getTaskId()) + " is unknown");
  if (task->pending) return FailedPreconditionError(TaskName(task->id) + " is pending");
  if (task->finished) return FailedPreconditionError(TaskName(task->id) + " is already finished");
  return Status::Ok();
}

void DispatcherState::ApplyFinishTask(journal::FinishTask::Reader u) {
  FinishTaskAndMaybeJob(tasks_.at(u.getTaskId()));
}

void DispatcherState::FinishTaskAndMaybeJob(Task& task) {
  FinishTaskRecord(task);
  for (uint64_t id : indexes_.tasks_by_job.at(task.job_id)) {
    if (!tasks_.at(id).finished) return;
  }
  jobs_.at(task.job_id).finished = true;
  indexes_.unfinished_jobs.erase(task.job_id);
}

void DispatcherState::FinishTaskRecord(Task& task) {
  task.finished = true;
  if (effects_ != nullptr) effects_->tasks_finished.push_back(task.id);
  RemoveFromIndex(indexes_.tasks_by_worker, task.worker_address, task.id);
  ConsumeOutstandingSplits(task.id);
}

const Task* DispatcherState::FindTask(uint64_t task_id) const {
  auto it = tasks_.find(task_id);
  return it == tasks_.end() ? nullptr : &it->second;
}

Result<const Task*> DispatcherState::GetTask(uint64_t task_id) const {
  const Task* task = FindTask(task_id);
  if (task == nullptr) return NotFoundError(TaskName(task_id) + " is unknown");
  return task;
}

std::vector<const Task*> DispatcherState::TasksForWorker(std::string_view address) const {
  std::vector<const Task*> out;
  auto it = indexes_.tasks_by_worker.find(address);
  if (it == indexes_.tasks_by_worker.end()) return out;
  for (uint64_t id : it->second) out.push_back(&tasks_.at(id));
  return out;
}

std::vector<std::string> DispatcherState::TaskAddresses() const {
  std::vector<std::string> out;
  out.reserve(indexes_.tasks_by_worker.size());
  for (const auto& [address, ids] : indexes_.tasks_by_worker) out.push_back(address);
  return out;
}

std::vector<const Task*> DispatcherState::TasksForJob(uint64_t job_id) const {
  std::vector<const Task*> out;
  auto it = indexes_.tasks_by_job.find(job_id);
  if (it == indexes_.tasks_by_job.end()) return out;
  for (uint64_t id : it->second) out.push_back(&tasks_.at(id));
  return out;
}

const Task* DispatcherState::FindTaskForJobAndWorker(uint64_t job_id,
                                                     std::string_view address) const {
  auto it = indexes_.task_by_job_worker.find(std::make_pair(job_id, std::string(address)));
  return it == indexes_.task_by_job_worker.end() ? nullptr : FindTask(it->second);
}

std::vector<const PendingTask*> DispatcherState::PendingTasks(uint64_t job_id) const {
  std::vector<const PendingTask*> out;
  const Job* job = FindJob(job_id);
  if (job == nullptr) return out;
  for (const PendingTask& pending : job->pending_tasks) out.push_back(&pending);
  return out;
}

}  // namespace dispatch::state
