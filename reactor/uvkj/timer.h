// UvTimer: a kj::Timer whose events are fired by one uv_timer_t. Time is the
// libuv loop's cached clock (uv_now, milliseconds), so KJ timeouts and libuv
// timers agree on "now". The uv timer is re-armed whenever the earliest KJ
// timer event changes, so a pending KJ timeout keeps the loop alive and an
// idle loop sleeps until exactly the next deadline.
#pragma once

#include <uv.h>

#include <kj/timer.h>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::uvkj {

class UvTimer final : public kj::Timer {
 public:
  explicit UvTimer(uv_loop_t* loop);
  ~UvTimer() noexcept(false);
  UvTimer(const UvTimer&) = delete;
  UvTimer& operator=(const UvTimer&) = delete;

  kj::TimePoint now() const override;
  kj::Promise<void> atTime(kj::TimePoint time) override;
  kj::Promise<void> afterDelay(kj::Duration delay) override;

 private:
  static void OnTimer(uv_timer_t* handle);
  kj::TimePoint LoopNow() const;
  // Fires due events and arms the uv timer for the next one (or stops it).
  void Advance();

  uv_loop_t* const loop_;
  UvHandle<uv_timer_t> timer_;
  kj::TimerImpl impl_;
};

}  // namespace dispatch::uvkj
