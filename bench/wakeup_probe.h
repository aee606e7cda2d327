// The cost of waking a process on this machine, measured in the benchmark's
// own run: a loopback round trip whose requester slept only as long as the
// hop takes, and one whose requester slept while the other side worked for a
// while first. On a VM whose idle vCPUs halt, the second wake-up is slower,
// and every hop of a round trip that waits on an fsync is of that kind.
#pragma once

#include <cstdint>

namespace dispatch::bench {

struct WakeupProbe {
  double awake_p50_us = 0;   // the child answers at once
  double asleep_p50_us = 0;  // the child answers after `idle_us` busy: we slept that long
};

// Forks an echo child on a socketpair; the busy time is not counted in the
// round trip. Throws std::runtime_error on failure.
WakeupProbe ProbeWakeups(uint64_t rounds, uint64_t idle_us);

}  // namespace dispatch::bench
