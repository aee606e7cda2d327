#include "reactor/consumer_tracker.h"

#include <algorithm>

namespace dispatch::reactor {

void ConsumerTracker::Initialize(const state::DispatcherState& state, int64_t now_micros) {
  for (const state::JobClient* client : state.ListJobClients())
    Heartbeat(client->id, -1, now_micros);
}

void ConsumerTracker::Heartbeat(uint64_t job_client_id, int64_t current_round, int64_t now_micros) {
  Client& client = clients_[job_client_id];
  client.last_heartbeat_ms = clock_.NowMs();
  client.last_heartbeat_micros = now_micros;
  client.round = std::max(client.round, current_round);
}

void ConsumerTracker::Forget(uint64_t job_client_id) { clients_.erase(job_client_id); }

void ConsumerTracker::Released(uint64_t job_client_id, uint64_t job_id) {
  clients_.erase(job_client_id);
  released_[job_client_id] = job_id;
  // Ids grow, so the smallest is the oldest.
  while (released_.size() > kMaxReleased) released_.erase(released_.begin());
}

uint64_t ConsumerTracker::ReleasedJob(uint64_t job_client_id) const {
  auto it = released_.find(job_client_id);
  return it == released_.end() ? 0 : it->second;
}

int64_t ConsumerTracker::Round(uint64_t job_client_id) const {
  auto it = clients_.find(job_client_id);
  return it == clients_.end() ? -1 : it->second.round;
}

int64_t ConsumerTracker::JobRound(const state::DispatcherState& state, uint64_t job_id) const {
  int64_t round = -1;
  for (const state::JobClient* client : state.ClientsForJob(job_id))
    round = std::max(round, Round(client->id));
  return round;
}

int64_t ConsumerTracker::LastHeartbeatMicros(uint64_t job_client_id) const {
  auto it = clients_.find(job_client_id);
  return it == clients_.end() ? 0 : it->second.last_heartbeat_micros;
}

std::vector<uint64_t> ConsumerTracker::TimedOut(uint64_t timeout_ms) const {
  std::vector<uint64_t> out;
  uint64_t now = clock_.NowMs();
  for (const auto& [id, client] : clients_) {
    if (now - client.last_heartbeat_ms > timeout_ms) out.push_back(id);
  }
  return out;
}

bool ConsumerTracker::RequestRemoval(uint64_t task_id, uint32_t consumer_index, int64_t round,
                                     uint32_t num_consumers) {
  Removal& removal = removals_[task_id];
  if (removal.consumers.empty() || removal.round != round) {
    removal.round = round;
    removal.consumers.clear();
  }
  removal.consumers.insert(consumer_index);
  return removal.consumers.size() >= num_consumers;
}

}  // namespace dispatch::reactor
