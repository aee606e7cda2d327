// HaStatus: what an HA member (reactor/ha/member.h) shows on /metrics about
// its candidacy and, as a standby, about how hot it is (ha_metrics.h).
#pragma once

#include <cstdint>

namespace dispatch::ha {

struct HaStatus {
  bool leading = false;
  int64_t lease_ttl_seconds = 0;  // as etcd granted it (0: no lease yet)
  uint64_t campaigns = 0;
  uint64_t keepalives_ok = 0;
  uint64_t keepalives_failed = 0;
  uint64_t lease_grants_failed = 0;
  // A standby's follower (§6 of docs/high_availability.md).
  bool following = false;        // loaded, and the watch applies what follows
  uint64_t standby_seq = 0;      // the last record its store holds
  bool live_state = false;       // a live DispatcherState is kept beside it
  uint64_t standby_reloads = 0;  // loads started again (a watch that ended, fell behind, ...)
};

}  // namespace dispatch::ha
