#include "reactor/loop_pass_meter.h"

#include <algorithm>

namespace dispatch::reactor {

LoopPassMeter::LoopPassMeter(uv_loop_t* loop)
    : loop_(loop), prepare_(loop, this, uv_prepare_init) {
  uvkj::CheckUv(uv_loop_configure(loop, UV_METRICS_IDLE_TIME), "uv_loop_configure");
  uvkj::CheckUv(uv_prepare_start(prepare_.get(), &LoopPassMeter::OnPrepare), "uv_prepare_start");
  uv_unref(prepare_.base());  // never keeps the loop alive on its own
}

void LoopPassMeter::OnPrepare(uv_prepare_t* handle) {
  if (auto* self = static_cast<LoopPassMeter*>(handle->data)) self->Measure();
}

void LoopPassMeter::Measure() {
  const uint64_t now = uv_hrtime();
  const uint64_t idle = uv_metrics_idle_time(loop_);
  if (last_ns_ == 0) {
    // The first pass: what ran before the loop (start-up, recovery) is
    // not a pass.
    last_ns_ = now;
    last_idle_ns_ = idle;
    return;
  }
  const uint64_t elapsed = now - last_ns_;
  const uint64_t blocked = std::min(elapsed, idle - last_idle_ns_);
  const uint64_t busy = elapsed - blocked;
  last_ns_ = now;
  last_idle_ns_ = idle;
  ++passes_;
  max_busy_ns_ = std::max(max_busy_ns_, busy);
  if (busy > 10'000'000) ++passes_over_10ms_;
  busy_seconds_.Observe(static_cast<double>(busy) * 1e-9);
}

}  // namespace dispatch::reactor
