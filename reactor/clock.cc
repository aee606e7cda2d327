#include "reactor/clock.h"

#include <sys/time.h>
#include <uv.h>

namespace dispatch::reactor {

int64_t SystemClock::WallMicros() const {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  return static_cast<int64_t>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

uint64_t SystemClock::MonotonicNanos() const { return uv_hrtime(); }

const SystemClock& SystemClock::Get() {
  static const SystemClock clock;
  return clock;
}

}  // namespace dispatch::reactor
