// ConsumerTracker: what the dispatcher knows of consumers (job clients) without
// journaling it, as the reference does: last heartbeat (client timeout,
// listings), the highest round each reported (round-robin targets), released
// clients (precise late errors) and pending task removals (all consumers must
// ask at one round). Empty after a restart: known clients get a full timeout.
// REQUIRES: loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "reactor/serving_clock.h"
#include "state/dispatcher_state.h"

namespace dispatch::reactor {

class ConsumerTracker {
 public:
  explicit ConsumerTracker(const ServingClock& clock) : clock_(clock) {}

  // After recovery: every client of the state counts as heard from now.
  void Initialize(const state::DispatcherState& state, int64_t now_micros);

  // The client called in; `current_round` < 0 means it reported none.
  void Heartbeat(uint64_t job_client_id, int64_t current_round, int64_t now_micros);
  // The client was released: forget it, but remember its job for a while so
  // a late heartbeat gets a precise error (e.g. "job garbage-collected").
  void Forget(uint64_t job_client_id);
  void Released(uint64_t job_client_id, uint64_t job_id);
  // The job of a released client still remembered; 0 when none.
  uint64_t ReleasedJob(uint64_t job_client_id) const;

  // The highest round the client reported; -1 when none.
  int64_t Round(uint64_t job_client_id) const;
  // The highest round any client of the job reported; -1 when none.
  int64_t JobRound(const state::DispatcherState& state, uint64_t job_id) const;
  int64_t LastHeartbeatMicros(uint64_t job_client_id) const;
  // Clients not heard from within `timeout_ms` (serving time: the
  // dispatcher's own stalls do not count).
  std::vector<uint64_t> TimedOut(uint64_t timeout_ms) const;

  // Consumer `consumer_index` asks to remove `task_id` at `round`. True once
  // every one of `num_consumers` consumers asked at that same round; a request
  // at another round starts the agreement over.
  bool RequestRemoval(uint64_t task_id, uint32_t consumer_index, int64_t round,
                      uint32_t num_consumers);
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

  const ServingClock& clock_;
  std::map<uint64_t, Client> clients_;
  std::map<uint64_t, uint64_t> released_;  // job client -> job
  std::map<uint64_t, Removal> removals_;
};

}  // namespace dispatch::reactor
