// ConsumerRounds: what the dispatcher knows of consumers (job clients) without
// journaling it, as the reference does: the last heartbeat (client timeouts,
// listings), the highest round each reported (round-robin targets), released
// clients (precise late errors) and pending task removals (every consumer
// must ask at one round). Soft state (soft_state.h): empty after a restart,
// where every known client is heard from anew. Time comes in as arguments:
// `now_ms` on the serving clock (reactor/serving_clock.h, which leaves out
// the dispatcher's own stalls), `now_micros` on the wall clock of the state.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "state/dispatcher_state.h"

namespace dispatch::state {

class ConsumerRounds {
 public:
  // After recovery: every client of `state` counts as heard from now.
  void Initialize(const DispatcherState& state, uint64_t now_ms, int64_t now_micros);

  // The client called in; `round` < 0 means it reported none.
  void Heard(uint64_t job_client_id, int64_t round, uint64_t now_ms, int64_t now_micros);
  // The client is gone from the state without a release (nothing to remember).
  void Forget(uint64_t job_client_id);
  // The client was released: forgotten, but its job is remembered for a
  // while so that a late heartbeat gets a precise error.
  void Released(uint64_t job_client_id, uint64_t job_id);
  // The job of a released client still remembered; 0 when none.
  uint64_t ReleasedJob(uint64_t job_client_id) const;

  // The highest round the client reported; -1 when none.
  int64_t Round(uint64_t job_client_id) const;
  // The highest round any client of the job reported; -1 when none.
  int64_t JobRound(const DispatcherState& state, uint64_t job_id) const;
  // Wall-clock micros of the client's last heartbeat; 0 when none since start.
  int64_t LastHeartbeatMicros(uint64_t job_client_id) const;
  // Clients not heard from within `timeout_ms` of `now_ms`, by id.
  std::vector<uint64_t> TimedOut(uint64_t now_ms, uint64_t timeout_ms) const;

  // Task removal agreement: consumer `consumer_index` asks to remove
  // `task_id` at `round`; a request at another round than the last starts
  // the agreement over. WouldAgree says whether this request completes it
  // (every one of `num_consumers` consumers asked at that round); Vote
  // records it.
  bool WouldAgree(uint64_t task_id, uint32_t consumer_index, int64_t round,
                  uint32_t num_consumers) const;
  void Vote(uint64_t task_id, uint32_t consumer_index, int64_t round);
  void ForgetTask(uint64_t task_id) { removals_.erase(task_id); }

 private:
  struct Client {
    uint64_t last_heartbeat_ms = 0;
    int64_t last_heartbeat_micros = 0;
    int64_t round = -1;
  };
  struct Removal {
    int64_t round = 0;
    std::set<uint32_t> consumers;
  };

  // Released clients remembered (bounded: the oldest go first).
  static constexpr size_t kMaxReleased = 100000;

  std::map<uint64_t, Client> clients_;
  std::map<uint64_t, uint64_t> released_;  // job client -> job
  std::map<uint64_t, Removal> removals_;
};

}  // namespace dispatch::state
