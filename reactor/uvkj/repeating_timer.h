// UvRepeatingTimer: a uv_timer_t that calls a function every `interval` on
// the loop thread, and records how late each firing was (libuv runs timers
// only between other callbacks, so lateness measures loop starvation).
// Exceptions from the callback are logged, never propagated into libuv.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::uvkj {

class UvRepeatingTimer {
 public:
  UvRepeatingTimer(uv_loop_t* loop, uint64_t interval_ms, std::function<void()> callback);
  ~UvRepeatingTimer();
  UvRepeatingTimer(const UvRepeatingTimer&) = delete;
  UvRepeatingTimer& operator=(const UvRepeatingTimer&) = delete;

  void Start();
  void Stop();
  // A timer that must not keep the loop alive on its own.
  void Unref();

  uint64_t ticks() const { return ticks_; }
  uint64_t interval_ms() const { return interval_ms_; }
  uint64_t max_lateness_us() const { return max_lateness_us_; }
  // How late the current (or the last) firing was; read it in the callback.
  uint64_t last_lateness_us() const { return last_lateness_us_; }

 private:
  static void OnTimer(uv_timer_t* handle);
  void Fire();

  UvHandle<uv_timer_t> timer_;
  const uint64_t interval_ms_;
  std::function<void()> callback_;
  uint64_t due_ns_ = 0;  // uv_hrtime() at which the next firing is due
  uint64_t ticks_ = 0;
  uint64_t max_lateness_us_ = 0;
  uint64_t last_lateness_us_ = 0;
};

}  // namespace dispatch::uvkj
