// WorkerLiveness: which registered workers are heard from and over which
// connection, without journaling it: per address the registration (worker id)
// it last heartbeated as, the connection it is attached to (0: none, as after
// a restart), and when it was last heard from. Soft state (soft_state.h): a
// restart starts every registered worker unattached, heard from at start.
// Connections are the reactor's ids for its links (nonzero); `now_ms` is the
// serving clock (reactor/serving_clock.h), `now_micros` the state's wall clock.
// Invariant: an address is in the connection index under the connection its
// entry names, and under no other.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "state/dispatcher_state.h"

namespace dispatch::state {

class WorkerLiveness {
 public:
  // After recovery: every worker of `state` is known, unattached, and gets a
  // worker timeout from `now_ms` to come back.
  void Initialize(const DispatcherState& state, uint64_t now_ms);

  // Whether a heartbeat of registration `worker_id` at `address` over
  // `connection` attaches the worker anew: it was not attached to this
  // connection as this registration (first heartbeat since it registered,
  // reconnected, or the dispatcher restarted).
  bool WouldAttach(std::string_view address, uint64_t worker_id, uint64_t connection) const;
  // Records that heartbeat; returns WouldAttach's answer from before it.
  bool Heard(const std::string& address, uint64_t worker_id, uint64_t connection, uint64_t now_ms,
             int64_t now_micros);
  // The worker at `address` is gone (removed): forgets it.
  void Forget(std::string_view address);
  // The connection dropped: every address attached to it, by address, each
  // left unattached (the caller removes them).
  std::vector<std::string> Detach(uint64_t connection);

  // Addresses not heard from within `timeout_ms` of `now_ms`.
  std::vector<std::string> TimedOut(uint64_t now_ms, uint64_t timeout_ms) const;
  bool IsConnected(std::string_view address) const;
  // The connection the worker at `address` is attached to; 0 when none.
  uint64_t ConnectionOf(std::string_view address) const;
  // Wall-clock micros of the last heartbeat; 0 when none since start.
  int64_t LastHeartbeatMicros(std::string_view address) const;

 private:
  struct Entry {
    uint64_t worker_id = 0;
    uint64_t connection = 0;  // 0: not attached
    uint64_t last_heartbeat_ms = 0;
    int64_t last_heartbeat_micros = 0;
  };
  // Takes `address` out of its connection's index entry.
  void Unindex(const std::string& address, uint64_t connection);

  std::map<std::string, Entry, std::less<>> entries_;
  std::map<uint64_t, std::set<std::string>> by_connection_;
};

}  // namespace dispatch::state
