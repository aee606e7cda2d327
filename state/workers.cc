// Workers: registration with a fresh id per registration, removal when the
// reactor declares a worker dead. A worker's address is unique among the
// registered workers; tasks are bound to the address and survive removal.

#include <algorithm>
#include <cstdint>
#include <string>

#include "state/bytes.h"
#include "state/dispatcher_state.h"

namespace dispatch::state {

namespace {
std::string WorkerName(uint64_t id) { return "worker " + std::to_string(id); }
}  // namespace

Status DispatcherState::CheckRegisterWorker(journal::RegisterWorker::Reader u) const {
  const uint64_t id = u.getWorkerId();
  if (id == 0) return InvalidArgumentError("worker id 0 is reserved");
  if (id == UINT64_MAX) {
    return InvalidArgumentError("worker id " + std::to_string(id) +
                                " is the largest: the next worker id would wrap to 0");
  }
  if (workers_.contains(id)) return AlreadyExistsError(WorkerName(id) + " already exists");
  if (id < next_worker_id_) {
    return InvalidArgumentError(WorkerName(id) + " reuses an id below the next worker id " +
                                std::to_string(next_worker_id_));
  }
  if (u.getAddress().size() == 0) {
    return InvalidArgumentError(WorkerName(id) + " has an empty address");
  }
  auto it = indexes_.worker_by_address.find(ToView(u.getAddress()));
  if (it != indexes_.worker_by_address.end()) {
    return AlreadyExistsError("address " + ToString(u.getAddress()) + " is already registered by " +
                              WorkerName(it->second));
  }
  return Status::Ok();
}

void DispatcherState::ApplyRegisterWorker(journal::RegisterWorker::Reader u, int64_t now) {
  Worker worker;
  worker.id = u.getWorkerId();
  worker.address = ToString(u.getAddress());
  worker.transfer_address = ToString(u.getTransferAddress());
  for (capnp::Text::Reader tag : u.getTags()) worker.tags.push_back(ToString(tag));
  worker.incarnation = u.getIncarnation();
  worker.registered_micros = now;
  for (capnp::Text::Reader kind : u.getDatasetKinds()) worker.dataset_kinds.insert(ToString(kind));
  // A worker back at its address may serve data on another transfer address.
  auto tasks = indexes_.tasks_by_worker.find(worker.address);
  if (tasks != indexes_.tasks_by_worker.end()) {
    for (uint64_t task_id : tasks->second)
      tasks_.at(task_id).transfer_address = worker.transfer_address;
  }
  indexes_.worker_by_address.emplace(worker.address, worker.id);
  next_worker_id_ = worker.id + 1;
  workers_.emplace(worker.id, std::move(worker));
}

Status DispatcherState::CheckRemoveWorker(journal::RemoveWorker::Reader u) const {
  const uint64_t id = u.getWorkerId();
  if (!workers_.contains(id)) return NotFoundError(WorkerName(id) + " is unknown");
  auto closures = indexes_.closures_by_worker.find(id);
  if (closures != indexes_.closures_by_worker.end() && !closures->second.empty()) {
    return FailedPreconditionError(WorkerName(id) + " still runs closure " +
                                   std::to_string(*closures->second.begin()));
  }
  return Status::Ok();
}

void DispatcherState::ApplyRemoveWorker(journal::RemoveWorker::Reader u) {
  const Worker& worker = workers_.at(u.getWorkerId());
  auto tasks = indexes_.tasks_by_worker.find(worker.address);
  if (tasks != indexes_.tasks_by_worker.end()) {
    for (uint64_t task_id : tasks->second) RequeueOutstandingSplits(tasks_.at(task_id));
  }
  indexes_.worker_by_address.erase(worker.address);
  indexes_.closures_by_worker.erase(worker.id);
  workers_.erase(u.getWorkerId());
}

const Worker* DispatcherState::FindWorker(uint64_t worker_id) const {
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? nullptr : &it->second;
}

const Worker* DispatcherState::FindWorkerByAddress(std::string_view address) const {
  auto it = indexes_.worker_by_address.find(address);
  return it == indexes_.worker_by_address.end() ? nullptr : FindWorker(it->second);
}

Result<const Worker*> DispatcherState::GetWorker(uint64_t worker_id) const {
  const Worker* worker = FindWorker(worker_id);
  if (worker == nullptr) return NotFoundError(WorkerName(worker_id) + " is unknown");
  return worker;
}

std::vector<const Worker*> DispatcherState::ListWorkers(size_t max) const {
  std::vector<const Worker*> out;
  out.reserve(std::min(max, workers_.size()));
  for (const auto& [id, worker] : workers_) {
    if (out.size() >= max) break;
    out.push_back(&worker);
  }
  return out;
}

std::vector<const Worker*> DispatcherState::ListWorkers() const {
  std::vector<const Worker*> out;
  out.reserve(workers_.size());
  for (const auto& [id, worker] : workers_) out.push_back(&worker);
  return out;
}

}  // namespace dispatch::state
