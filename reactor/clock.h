// Clock: the one source of time for what the dispatcher decides (STYLE.md
// 5a, KJ's TimerImpl pattern): wall time, which stamps every Update and so
// survives restarts, and monotonic time, which deadlines and holds are
// measured in. The dispatcher reads the system (SystemClock); the
// simulation drives its own. Measurements alone (histograms, loop meters,
// traces) may read the system's monotonic clock directly, and the transport's
// timeouts (serving_clock.h, message_guard_stream.h, the drain) the loop's
// uv_now(): they time sockets, which the simulation does not have.
#pragma once

#include <cstdint>

namespace dispatch::reactor {

class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds since the Unix epoch.
  virtual int64_t WallMicros() const = 0;
  // Nanoseconds from an arbitrary start; never goes back.
  virtual uint64_t MonotonicNanos() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t WallMicros() const override;
  uint64_t MonotonicNanos() const override;
  // The process's one instance.
  static const SystemClock& Get();
};

}  // namespace dispatch::reactor
