#include "reactor/serving_clock.h"

namespace dispatch::reactor {

void ServingClock::Tick(uint64_t period_ms) {
  const uint64_t now = uv_now(loop_);
  if (last_tick_ms_ != 0 && now - last_tick_ms_ > 2 * period_ms) {
    stalled_ms_ += now - last_tick_ms_ - period_ms;
  }
  last_tick_ms_ = now;
}

}  // namespace dispatch::reactor
