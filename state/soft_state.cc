#include "state/soft_state.h"

namespace dispatch::state {

void SoftState::Initialize(const DispatcherState& state, uint64_t now_ms, int64_t now_micros) {
  workers.Initialize(state, now_ms);
  absence.Initialize(state, now_ms);
  consumers.Initialize(state, now_ms, now_micros);
}

bool SoftState::Apply(const SoftChanges& changes) {
  for (const SoftChanges::ClientHeard& heard : changes.clients_heard)
    consumers.Heard(heard.job_client_id, heard.round, heard.now_ms, heard.now_micros);
  for (const auto& [client_id, job_id] : changes.clients_released)
    consumers.Released(client_id, job_id);
  for (uint64_t client_id : changes.clients_forgotten) consumers.Forget(client_id);
  if (const auto& vote = changes.removal_vote)
    consumers.Vote(vote->task_id, vote->consumer_index, vote->round);
  for (uint64_t task_id : changes.removals_forgotten) consumers.ForgetTask(task_id);
  if (const auto& gone = changes.address_gone) absence.Gone(gone->address, gone->now_ms);
  for (const std::string& address : changes.absences_forgotten) absence.Forget(address);
  if (const auto& heard = changes.worker_heard) {
    absence.Forget(heard->address);
    return workers.Heard(heard->address, heard->worker_id, heard->connection, heard->now_ms,
                         heard->now_micros);
  }
  return false;
}

}  // namespace dispatch::state
