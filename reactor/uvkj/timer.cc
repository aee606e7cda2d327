#include "reactor/uvkj/timer.h"

#include <cstdint>
#include <limits>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::uvkj {

UvTimer::UvTimer(uv_loop_t* loop)
    : loop_(loop),
      timer_(loop, this, uv_timer_init),
      impl_(kj::origin<kj::TimePoint>() + uv_now(loop) * kj::MILLISECONDS) {}

UvTimer::~UvTimer() noexcept(false) = default;

kj::TimePoint UvTimer::LoopNow() const {
  return kj::origin<kj::TimePoint>() + uv_now(loop_) * kj::MILLISECONDS;
}

kj::TimePoint UvTimer::now() const { return impl_.now(); }

kj::Promise<void> UvTimer::atTime(kj::TimePoint time) {
  impl_.advanceTo(LoopNow());
  auto promise = impl_.atTime(time);
  Advance();
  return promise;
}

kj::Promise<void> UvTimer::afterDelay(kj::Duration delay) {
  impl_.advanceTo(LoopNow());
  auto promise = impl_.afterDelay(delay);
  Advance();
  return promise;
}

void UvTimer::Advance() {
  kj::TimePoint now = LoopNow();
  impl_.advanceTo(now);
  KJ_IF_MAYBE(ms, impl_.timeoutToNextEvent(now, kj::MILLISECONDS, std::numeric_limits<int64_t>::max())) {
    uv_timer_start(timer_.get(), &UvTimer::OnTimer, *ms, 0);
  } else {
    uv_timer_stop(timer_.get());
  }
}

void UvTimer::OnTimer(uv_timer_t* handle) {
  if (auto* self = static_cast<UvTimer*>(handle->data)) self->Advance();
}

}  // namespace dispatch::uvkj
