#include "state/consumer_rounds.h"

#include <algorithm>

namespace dispatch::state {

void ConsumerRounds::Initialize(const DispatcherState& state, uint64_t now_ms, int64_t now_micros) {
  for (const JobClient* client : state.ListJobClients()) Heard(client->id, -1, now_ms, now_micros);
}

void ConsumerRounds::Heard(uint64_t job_client_id, int64_t round, uint64_t now_ms,
                           int64_t now_micros) {
  Client& client = clients_[job_client_id];
  client.last_heartbeat_ms = now_ms;
  client.last_heartbeat_micros = now_micros;
  client.round = std::max(client.round, round);
}

void ConsumerRounds::Forget(uint64_t job_client_id) { clients_.erase(job_client_id); }

void ConsumerRounds::Released(uint64_t job_client_id, uint64_t job_id) {
  clients_.erase(job_client_id);
  released_[job_client_id] = job_id;
  // Ids grow, so the smallest is the oldest.
  while (released_.size() > kMaxReleased) released_.erase(released_.begin());
}

uint64_t ConsumerRounds::ReleasedJob(uint64_t job_client_id) const {
  auto it = released_.find(job_client_id);
  return it == released_.end() ? 0 : it->second;
}

int64_t ConsumerRounds::Round(uint64_t job_client_id) const {
  auto it = clients_.find(job_client_id);
  return it == clients_.end() ? -1 : it->second.round;
}

int64_t ConsumerRounds::JobRound(const DispatcherState& state, uint64_t job_id) const {
  int64_t round = -1;
  for (const JobClient* client : state.ClientsForJob(job_id))
    round = std::max(round, Round(client->id));
  return round;
}

int64_t ConsumerRounds::LastHeartbeatMicros(uint64_t job_client_id) const {
  auto it = clients_.find(job_client_id);
  return it == clients_.end() ? 0 : it->second.last_heartbeat_micros;
}

std::vector<uint64_t> ConsumerRounds::TimedOut(uint64_t now_ms, uint64_t timeout_ms) const {
  std::vector<uint64_t> out;
  for (const auto& [id, client] : clients_) {
    if (now_ms - client.last_heartbeat_ms > timeout_ms) out.push_back(id);
  }
  return out;
}

bool ConsumerRounds::WouldAgree(uint64_t task_id, uint32_t consumer_index, int64_t round,
                                uint32_t num_consumers) const {
  size_t agreed = 1;  // this request
  auto it = removals_.find(task_id);
  if (it != removals_.end() && it->second.round == round) {
    const std::set<uint32_t>& consumers = it->second.consumers;
    agreed = consumers.size() + (consumers.contains(consumer_index) ? 0 : 1);
  }
  return agreed >= num_consumers;
}

void ConsumerRounds::Vote(uint64_t task_id, uint32_t consumer_index, int64_t round) {
  Removal& removal = removals_[task_id];
  if (removal.consumers.empty() || removal.round != round) {
    removal.round = round;
    removal.consumers.clear();
  }
  removal.consumers.insert(consumer_index);
}

}  // namespace dispatch::state
