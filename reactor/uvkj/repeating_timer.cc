#include "reactor/uvkj/repeating_timer.h"

#include <kj/debug.h>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::uvkj {

UvRepeatingTimer::UvRepeatingTimer(uv_loop_t* loop, uint64_t interval_ms,
                                   std::function<void()> callback)
    : timer_(loop, this, uv_timer_init),
      interval_ms_(interval_ms == 0 ? 1 : interval_ms),
      callback_(std::move(callback)) {}

UvRepeatingTimer::~UvRepeatingTimer() = default;

void UvRepeatingTimer::Start() {
  due_ns_ = uv_hrtime() + interval_ms_ * 1000000;
  CheckUv(uv_timer_start(timer_.get(), &UvRepeatingTimer::OnTimer, interval_ms_, interval_ms_),
          "uv_timer_start");
}

void UvRepeatingTimer::Stop() { uv_timer_stop(timer_.get()); }

void UvRepeatingTimer::Unref() { uv_unref(timer_.base()); }

void UvRepeatingTimer::OnTimer(uv_timer_t* handle) {
  if (auto* self = static_cast<UvRepeatingTimer*>(handle->data)) self->Fire();
}

void UvRepeatingTimer::Fire() {
  uint64_t now = uv_hrtime();
  last_lateness_us_ = 0;
  if (now > due_ns_) {
    uint64_t late_us = (now - due_ns_) / 1000;
    last_lateness_us_ = late_us;
    if (late_us > max_lateness_us_) max_lateness_us_ = late_us;
  }
  // libuv re-arms a repeating timer relative to when it ran; so do we.
  due_ns_ = now + interval_ms_ * 1000000;
  ++ticks_;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([this]() { callback_(); })) {
    KJ_LOG(ERROR, "exception in a timer callback", *e);
  }
}

}  // namespace dispatch::uvkj
