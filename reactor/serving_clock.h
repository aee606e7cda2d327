// ServingClock: the loop's millisecond clock minus the time the loop itself
// stood still. Peers' liveness (worker and client timeouts) is measured on
// it, so a dispatcher that stalled (a slow disk under an fsync, a starved or
// stopped process) does not blame its peers for the silence it caused: after
// a stall, libuv runs due timers before it reads the heartbeats that queued
// up meanwhile, and on the plain loop clock every peer would look timed out.
// A stall is seen by the periodic liveness timer: a tick that comes more than
// two periods after the previous one adds its lateness beyond one period.
// REQUIRES: loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>

namespace dispatch::reactor {

class ServingClock {
 public:
  explicit ServingClock(uv_loop_t* loop) : loop_(loop) {}

  uint64_t NowMs() const { return uv_now(loop_) - stalled_ms_; }
  // Called by a timer repeating every `period_ms`, before the checks it runs.
  void Tick(uint64_t period_ms);
  // The loop's stalls not counted against peers, in total.
  uint64_t stalled_ms() const { return stalled_ms_; }

 private:
  uv_loop_t* const loop_;
  uint64_t last_tick_ms_ = 0;  // 0: no tick yet
  uint64_t stalled_ms_ = 0;
};

}  // namespace dispatch::reactor
