#include "state/worker_liveness.h"

namespace dispatch::state {

void WorkerLiveness::Initialize(const DispatcherState& state, uint64_t now_ms) {
  for (const Worker* worker : state.ListWorkers()) {
    Entry& entry = entries_.try_emplace(worker->address).first->second;
    entry.worker_id = worker->id;
    entry.last_heartbeat_ms = now_ms;
  }
}

bool WorkerLiveness::WouldAttach(std::string_view address, uint64_t worker_id,
                                 uint64_t connection) const {
  auto it = entries_.find(address);
  return it == entries_.end() || it->second.connection != connection ||
         it->second.worker_id != worker_id;
}

bool WorkerLiveness::Heard(const std::string& address, uint64_t worker_id, uint64_t connection,
                           uint64_t now_ms, int64_t now_micros) {
  const bool attached = WouldAttach(address, worker_id, connection);
  Entry& entry = entries_.try_emplace(address).first->second;
  entry.last_heartbeat_ms = now_ms;
  entry.last_heartbeat_micros = now_micros;
  if (attached) {
    if (entry.connection != 0) Unindex(address, entry.connection);
    entry.worker_id = worker_id;
    entry.connection = connection;
    by_connection_[connection].insert(address);
  }
  return attached;
}

void WorkerLiveness::Unindex(const std::string& address, uint64_t connection) {
  auto it = by_connection_.find(connection);
  if (it == by_connection_.end()) return;
  it->second.erase(address);
  if (it->second.empty()) by_connection_.erase(it);
}

void WorkerLiveness::Forget(std::string_view address) {
  auto it = entries_.find(address);
  if (it == entries_.end()) return;
  if (it->second.connection != 0) Unindex(it->first, it->second.connection);
  entries_.erase(it);
}

std::vector<std::string> WorkerLiveness::Detach(uint64_t connection) {
  std::vector<std::string> detached;
  auto it = by_connection_.find(connection);
  if (it == by_connection_.end()) return detached;
  std::set<std::string> addresses = std::move(it->second);
  by_connection_.erase(it);
  for (const std::string& address : addresses) {
    auto entry = entries_.find(address);
    if (entry == entries_.end() || entry->second.connection != connection) continue;
    entry->second.connection = 0;
    detached.push_back(address);
  }
  return detached;
}

std::vector<std::string> WorkerLiveness::TimedOut(uint64_t now_ms, uint64_t timeout_ms) const {
  std::vector<std::string> out;
  for (const auto& [address, entry] : entries_) {
    if (now_ms - entry.last_heartbeat_ms > timeout_ms) out.push_back(address);
  }
  return out;
}

bool WorkerLiveness::IsConnected(std::string_view address) const {
  return ConnectionOf(address) != 0;
}

uint64_t WorkerLiveness::ConnectionOf(std::string_view address) const {
  auto it = entries_.find(address);
  return it == entries_.end() ? 0 : it->second.connection;
}

int64_t WorkerLiveness::LastHeartbeatMicros(std::string_view address) const {
  auto it = entries_.find(address);
  return it == entries_.end() ? 0 : it->second.last_heartbeat_micros;
}

}  // namespace dispatch::state
