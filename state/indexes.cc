// The derived indexes of DispatcherState and the cross-reference checks that a
// state rebuilt from a snapshot must pass. Apply maintains the indexes update
// by update; ComputeIndexes derives them from scratch; tests compare the two.

#include <algorithm>
#include <string>

#include "state/dispatcher_state.h"
#include "state/index_util.h"

namespace dispatch::state {

DispatcherState::Indexes DispatcherState::ComputeIndexes() const {
  Indexes x;
  for (const auto& [id, d] : datasets_) {
    x.dataset_by_fingerprint.emplace(d.fingerprint, id);
    x.dataset_by_definition_key.emplace(d.definition_key, id);
  }
  for (const auto& [id, w] : workers_) x.worker_by_address.emplace(w.address, id);
  // Ids grow, so the latest job created with a key is the one with the largest id.
  for (const auto& [id, j] : jobs_) {
    if (j.named_key.has_value()) x.job_by_name.insert_or_assign(*j.named_key, id);
    if (!j.finished) x.unfinished_jobs.insert(id);
  }
  for (const auto& [id, t] : tasks_) {
    if (!t.finished) AddToIndex(x.tasks_by_worker, t.worker_address, id);
    if (!t.pending) AddToIndex(x.tasks_by_job, t.job_id, id);
    x.task_by_job_worker.emplace(std::make_pair(t.job_id, t.worker_address), id);
  }
  for (const auto& [id, c] : job_clients_) AddToIndex(x.clients_by_job, c.job_id, id);
  for (const auto& [id, c] : closures_) {
    if (c.state == ClosureState::QUEUED) {
      auto kind = x.queue_by_kind.find(c);
      if (kind == x.queue_by_kind.end())
        kind =
            x.queue_by_kind
                .emplace(ClosureKind{c.function_name, c.resources}, KindQueue())
                .first;
      kind->second.emplace(QueueKey{c.priority, c.queue_position}, id);
    }
    if (c.state == ClosureState::ASSIGNED) AddToIndex(x.closures_by_worker, c.worker_id, id);
    AddToIndex(x.closures_by_coordinator, c.coordinator_id, id);
    if (c.request_id != 0)
      x.closure_by_request.emplace(std::make_pair(c.coordinator_id, c.request_id), id);
    if (!IsClosureDone(c.state)) {
      CountUp(x.unfinished_by_coordinator, c.coordinator_id);
      if (c.deadline_micros != 0) x.closure_deadlines.emplace(c.deadline_micros, id);
      for (uint64_t input : c.inputs) AddToIndex(x.needed_by, input, id);
    }
    ++x.closures_in_state[ClosureStateSlot(c.state)];
  }
  for (const auto& [id, r] : resources_) {
    if (r.request_id != 0)
      x.resource_by_request.emplace(std::make_pair(r.coordinator_id, r.request_id), id);
  }
  return x;
}

void DispatcherState::RebuildIndexes() { indexes_ = ComputeIndexes(); }

Status DispatcherState::CheckIndexes() const {
  const Indexes x = ComputeIndexes();
  auto differs = [](const char* name) {
    return InternalError(std::string("index ") + name + " disagrees with the records");
  };
  if (x.dataset_by_fingerprint != indexes_.dataset_by_fingerprint)
    return differs("dataset_by_fingerprint");
  if (x.dataset_by_definition_key != indexes_.dataset_by_definition_key)
    return differs("dataset_by_definition_key");
  if (x.worker_by_address != indexes_.worker_by_address) return differs("worker_by_address");
  if (x.job_by_name != indexes_.job_by_name) return differs("job_by_name");
  if (x.unfinished_jobs != indexes_.unfinished_jobs) return differs("unfinished_jobs");
  if (x.tasks_by_worker != indexes_.tasks_by_worker) return differs("tasks_by_worker");
  if (x.tasks_by_job != indexes_.tasks_by_job) return differs("tasks_by_job");
  if (x.task_by_job_worker != indexes_.task_by_job_worker) return differs("task_by_job_worker");
  if (x.clients_by_job != indexes_.clients_by_job) return differs("clients_by_job");
  if (x.queue_by_kind != indexes_.queue_by_kind) return differs("queue_by_kind");
  if (x.closures_by_worker != indexes_.closures_by_worker) return differs("closures_by_worker");
  if (x.closures_by_coordinator != indexes_.closures_by_coordinator)
    return differs("closures_by_coordinator");
  if (x.closures_in_state != indexes_.closures_in_state) return differs("closures_in_state");
  if (x.unfinished_by_coordinator != indexes_.unfinished_by_coordinator)
    return differs("unfinished_by_coordinator");
  if (x.closure_by_request != indexes_.closure_by_request) return differs("closure_by_request");
  if (x.closure_deadlines != indexes_.closure_deadlines) return differs("closure_deadlines");
  if (x.resource_by_request != indexes_.resource_by_request)
    return differs("resource_by_request");
  if (x.needed_by != indexes_.needed_by) return differs("needed_by");
  // An index added to Indexes but not named above is still compared.
  if (x != indexes_) return differs("not named in CheckIndexes");
  return Status::Ok();
}

Status DispatcherState::CheckReferences() const {
  auto below = [](uint64_t id, uint64_t next, const char* what) {
    return id < next ? Status::Ok()
                     : DataLossError(std::string(what) + " " + std::to_string(id) +
                                     " is not below the next id " + std::to_string(next));
  };
  for (const auto& [id, d] : datasets_)
    DISPATCH_RETURN_IF_ERROR(below(id, next_dataset_id_, "dataset"));
  for (const auto& [id, w] : workers_)
    DISPATCH_RETURN_IF_ERROR(below(id, next_worker_id_, "worker"));
  for (const auto& [id, j] : jobs_) DISPATCH_RETURN_IF_ERROR(below(id, next_job_id_, "job"));
  for (const auto& [id, t] : tasks_) DISPATCH_RETURN_IF_ERROR(below(id, next_task_id_, "task"));
  for (const auto& [id, c] : job_clients_)
    DISPATCH_RETURN_IF_ERROR(below(id, next_job_client_id_, "job client"));
  for (const auto& [id, c] : closures_) {
    DISPATCH_RETURN_IF_ERROR(below(id, next_closure_id_, "closure"));
    for (uint64_t resource : c.resources) {
      if (!resources_.contains(resource)) {
        return DataLossError("closure " + std::to_string(id) + " uses unknown resource " +
                             std::to_string(resource));
      }
    }
    // A closure that is not done needs its inputs: they exist, are older, and
    // it waits exactly while one of them is not finished.
    if (IsClosureDone(c.state)) continue;
    bool inputs_finished = true;
    for (uint64_t input : c.inputs) {
      auto it = closures_.find(input);
      if (input >= id || it == closures_.end() || it->second.coordinator_id != c.coordinator_id) {
        return DataLossError("closure " + std::to_string(id) + " needs unknown input closure " +
                             std::to_string(input));
      }
      if (it->second.state != ClosureState::FINISHED) inputs_finished = false;
    }
    if (inputs_finished == (c.state == ClosureState::WAITING)) {
      return DataLossError("closure " + std::to_string(id) + " is " +
                           ClosureStateName(c.state) + " but its inputs are " +
                           (inputs_finished ? "" : "not ") + "all finished");
    }
  }
  for (const auto& [id, r] : resources_)
    DISPATCH_RETURN_IF_ERROR(below(id, next_resource_id_, "resource"));

  if (indexes_.dataset_by_fingerprint.size() != datasets_.size() ||
      indexes_.dataset_by_definition_key.size() != datasets_.size()) {
    return DataLossError("two datasets share a fingerprint or a definition key");
  }
  if (indexes_.worker_by_address.size() != workers_.size())
    return DataLossError("two workers share an address");
  if (indexes_.task_by_job_worker.size() != tasks_.size()) {
    return DataLossError("two tasks of one job share a worker address");
  }

  std::map<NamedJobKey, uint64_t> live_names;
  std::set<uint64_t> queued_tasks;
  for (const auto& [id, j] : jobs_) {
    const std::string name = "job " + std::to_string(id);
    if (!datasets_.contains(j.dataset_id)) return DataLossError(name + " names unknown dataset");
    if (j.processing_mode > ProcessingMode::HINT || j.target_workers > TargetWorkers::LOCAL) {
      return DataLossError(name + " has an unknown processing mode or target");
    }
    if (j.IsDynamic() == j.providers.empty())
      return DataLossError(name + " has split providers iff not DYNAMIC");
    const auto clients = indexes_.clients_by_job.find(id);
    const size_t num_clients =
        clients == indexes_.clients_by_job.end() ? 0 : clients->second.size();
    if (j.num_clients < 0 || static_cast<size_t>(j.num_clients) != num_clients) {
      return DataLossError(name + " counts " + std::to_string(j.num_clients) + " clients but has " +
                           std::to_string(num_clients));
    }
    if (j.named_key.has_value() && !j.garbage_collected &&
        !live_names.emplace(*j.named_key, id).second) {
      return DataLossError(name + " shares its name with another live job");
    }
    for (const PendingTask& p : j.pending_tasks) {
      auto task = tasks_.find(p.task_id);
      if (task == tasks_.end() || task->second.job_id != id || !task->second.pending ||
          !queued_tasks.insert(p.task_id).second) {
        return DataLossError(name + " queues task " + std::to_string(p.task_id) +
                             ", which is not its pending task");
      }
    }
  }
  for (const auto& [id, t] : tasks_) {
    if (!jobs_.contains(t.job_id))
      return DataLossError("task " + std::to_string(id) + " names an unknown job");
    if (t.pending != queued_tasks.contains(id)) {
      return DataLossError("task " + std::to_string(id) +
                           " is pending but not queued, or the reverse");
    }
    if (t.pending && t.finished)
      return DataLossError("task " + std::to_string(id) + " is pending and finished");
  }
  for (const auto& [id, c] : job_clients_) {
    if (!jobs_.contains(c.job_id))
      return DataLossError("job client " + std::to_string(id) + " names an unknown job");
  }
  for (const auto& [r, g] : split_grants_) {
    auto task = tasks_.find(r.task_id);
    if (task == tasks_.end() ||
        r.provider_index >= jobs_.at(task->second.job_id).providers.size()) {
      return DataLossError("split grant of task " + std::to_string(r.task_id) + " provider " +
                           std::to_string(r.provider_index) + " has no task or provider");
    }
  }
  size_t with_request = 0;
  for (const auto& [id, c] : closures_) with_request += c.request_id != 0 ? 1 : 0;
  if (indexes_.closure_by_request.size() != with_request) {
    return DataLossError("two closures of one coordinator share a request id");
  }
  size_t resources_with_request = 0;
  for (const auto& [id, r] : resources_) resources_with_request += r.request_id != 0 ? 1 : 0;
  if (indexes_.resource_by_request.size() != resources_with_request) {
    return DataLossError("two per-worker resources of one coordinator share a request id");
  }
  std::set<uint64_t> positions;
  for (const auto& [id, c] : closures_) {
    const std::string name = "closure " + std::to_string(id);
    if (c.state > ClosureState::WAITING) return DataLossError(name + " has an unknown state");
    if (c.state == ClosureState::ASSIGNED && !workers_.contains(c.worker_id)) {
      return DataLossError(name + " is assigned to unknown worker " + std::to_string(c.worker_id));
    }
    if (c.state == ClosureState::QUEUED &&
        (c.queue_position == 0 || c.queue_position >= next_queue_position_ ||
         !positions.insert(c.queue_position).second)) {
      return DataLossError(name + " has a bad queue position");
    }
    if (c.deadline_micros != 0 && IsClosureDone(c.state) && c.state != ClosureState::FAILED) {
      return DataLossError(name + " is " + ClosureStateName(c.state) + " but keeps a deadline");
    }
  }
  return Status::Ok();
}

}  // namespace dispatch::state
