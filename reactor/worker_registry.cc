#include "reactor/worker_registry.h"

#include <capnp/message.h>
#include <kj/debug.h>

#include "common/log.h"
#include "reactor/task_info.h"
#include "state/worker_planner.h"

namespace dispatch::reactor {

void WorkerRegistry::ErrorHandler::taskFailed(kj::Exception&& exception) {
  Log(LogLevel::kDebug, "worker push failed: ", exception.getDescription());
}

WorkerRegistry::WorkerRegistry(const ServingClock& clock, state::SoftState& soft,
                               DurableState& durable, const DataServiceOptions& options)
    : clock_(clock),
      soft_(soft),
      liveness_(soft.workers),
      durable_(durable),
      options_(options),
      pushes_(error_handler_) {}

WorkerRegistry::~WorkerRegistry() = default;

void WorkerRegistry::Heartbeat(const std::string& address, bool attached, bool has_control,
                               rpc::WorkerControl::Client control) {
  ++stats_.heartbeats;
  Entry& entry = entries_.try_emplace(address).first->second;
  if (attached) {
    entry.generation += 1;
    entry.pushes_in_flight = 0;  // answers to the old link's pushes no longer count
    // A capability of an earlier connection is dead with it: a worker that
    // attaches without one has none until it sends one.
    entry.control = nullptr;
  }
  if (has_control) entry.control = kj::mv(control);
  if (attached) {
    // Pushes that failed while it was gone: announce them over the new link.
    auto unpushed = unpushed_.find(address);
    if (unpushed != unpushed_.end()) {
      std::vector<uint64_t> ids(unpushed->second.begin(), unpushed->second.end());
      unpushed_.erase(unpushed);
      PushStartTasks(address, std::move(ids));
    }
  }
}

void WorkerRegistry::OnDisconnect(RpcServer::ConnectionId connection) {
  for (const std::string& address : liveness_.Detach(connection)) {
    Status status = Remove(address, "its connection dropped");
    if (status.ok()) ++stats_.removed_disconnected;
  }
}

void WorkerRegistry::CheckTimeouts() {
  if (options_.worker_timeout_ms == 0) return;
  for (const std::string& address :
       liveness_.TimedOut(clock_.NowMs(), options_.worker_timeout_ms)) {
    Status status = Remove(address, "no heartbeat within the worker timeout");
    if (status.ok()) ++stats_.removed_timed_out;
  }
}

Status WorkerRegistry::Remove(std::string_view address, const char* reason) {
  liveness_.Forget(address);
  auto entry = entries_.find(address);
  if (entry != entries_.end()) entries_.erase(entry);
  const state::Worker* worker = durable_.state().FindWorkerByAddress(address);
  if (worker == nullptr) return Status::Ok();
  const uint64_t worker_id = worker->id;
  if (on_worker_lost_) on_worker_lost_(worker_id);
  const state::Stamp stamp{durable_.pipeline().NowMicros(), durable_.pipeline().max_record_bytes()};
  state::WorkerRemovalPlan removal = state::PlanWorkerRemoval(
      durable_.state(), options_.closures.policy, worker_id, reason, clock_.NowMs(), stamp);
  Status status = Status::Ok();
  for (size_t i = 0; i < removal.updates.size() && status.ok(); ++i) {
    status = durable_.pipeline().Submit(removal.updates[i]);
  }
  if (status.ok()) {
    soft_.Apply(removal.soft);
    Log(LogLevel::kInfo, "removed worker ", worker_id, " at ", std::string(address).c_str(), ": ",
        reason);
    if (on_worker_removed_) on_worker_removed_();
  } else {
    Log(LogLevel::kWarning, "could not remove worker ", worker_id, ": ", status.ToString().c_str());
  }
  return status;
}

void WorkerRegistry::PushStartTasks(const std::string& address, std::vector<uint64_t> task_ids) {
  if (task_ids.empty()) return;
  pushes_.add(durable_.pipeline().Barrier().then([this, address, ids = kj::mv(task_ids)]() mutable {
    return SendStart(address, kj::mv(ids));
  }));
}

void WorkerRegistry::PushDeleteTasks(const std::string& address, std::vector<uint64_t> task_ids) {
  if (task_ids.empty()) return;
  pushes_.add(durable_.pipeline().Barrier().then([this, address, ids = kj::mv(task_ids)]() mutable {
    return SendDelete(address, kj::mv(ids));
  }));
}

void WorkerRegistry::RetryLater(const std::string& address, const std::vector<uint64_t>& task_ids) {
  ++stats_.pushes_failed;
  unpushed_[address].insert(task_ids.begin(), task_ids.end());
}

kj::Promise<void> WorkerRegistry::SendStart(std::string address, std::vector<uint64_t> task_ids) {
  const state::DispatcherState& state = durable_.state();
  std::vector<const state::Task*> tasks;
  for (uint64_t id : task_ids) {
    const state::Task* task = state.FindTask(id);
    if (task != nullptr && !task->finished && task->worker_address == address)
      tasks.push_back(task);
  }
  if (tasks.empty()) return kj::READY_NOW;
  auto entry = entries_.find(address);
  rpc::WorkerControl::Client* control = nullptr;
  if (entry != entries_.end()) {
    KJ_IF_MAYBE (c, entry->second.control) {
      control = c;
    }
  }
  if (control == nullptr) {
    RetryLater(address, task_ids);
    return kj::READY_NOW;
  }
  Entry& live = entry->second;
  if (live.pushes_in_flight >= kMaxPushesInFlight) {
    ++stats_.pushes_deferred;
    unpushed_[address].insert(task_ids.begin(), task_ids.end());
    return kj::READY_NOW;
  }
  auto request = control->startTasksRequest();
  auto list = request.initTasks(static_cast<unsigned>(tasks.size()));
  for (size_t i = 0; i < tasks.size(); ++i) FillTaskInfo(state, options_, *tasks[i], list[i]);
  ++stats_.pushes_sent;
  ++live.pushes_in_flight;
  const uint64_t generation = live.generation;
  return request.send().then(
      [this, address, generation](auto&&) { PushDone(address, generation); },
      [this, address, generation, task_ids = kj::mv(task_ids)](kj::Exception&& e) {
        Log(LogLevel::kDebug, "startTasks to ", address.c_str(), " failed: ", e.getDescription());
        PushDone(address, generation);
        RetryLater(address, task_ids);
      });
}

void WorkerRegistry::PushDone(const std::string& address, uint64_t generation) {
  auto entry = entries_.find(address);
  if (entry == entries_.end() || entry->second.generation != generation) return;
  if (entry->second.pushes_in_flight > 0) --entry->second.pushes_in_flight;
}

kj::Promise<void> WorkerRegistry::SendDelete(std::string address, std::vector<uint64_t> task_ids) {
  auto entry = entries_.find(address);
  if (entry == entries_.end()) return kj::READY_NOW;  // its next heartbeat learns it
  KJ_IF_MAYBE (control, entry->second.control) {
    auto request = control->deleteTasksRequest();
    auto list = request.initTaskIds(static_cast<unsigned>(task_ids.size()));
    for (size_t i = 0; i < task_ids.size(); ++i) list.set(i, task_ids[i]);
    ++stats_.pushes_sent;
    // A lost delete is harmless: the next heartbeat lists the task to delete.
    return request.send().then([](auto&&) {}, [this](kj::Exception&&) { ++stats_.pushes_failed; });
  }
  return kj::READY_NOW;
}

rpc::WorkerControl::Client* WorkerRegistry::ControlOf(std::string_view address) {
  if (!liveness_.IsConnected(address)) return nullptr;
  auto it = entries_.find(address);
  if (it == entries_.end()) return nullptr;
  KJ_IF_MAYBE (control, it->second.control) {
    return control;
  }
  return nullptr;
}

bool WorkerRegistry::IsConnected(std::string_view address) const {
  return liveness_.IsConnected(address);
}

}  // namespace dispatch::reactor
