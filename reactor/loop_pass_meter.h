// LoopPassMeter: how long each pass of the libuv loop kept the loop thread
// busy, i.e. how long a reply that became ready at the start of a pass could
// wait for the loop. A prepare handle runs once per pass, right before the
// loop blocks for I/O; the time since the previous one, less the time the
// loop spent blocked in epoll meanwhile (uv_metrics_idle_time), is the
// pass's busy time (the first pass starts at the first prepare: start-up
// before the loop runs is not a pass). Pings from another process measure the same thing plus
// their own scheduling; this is the loop's own figure (issue 12: no peer may
// stall it; note 42 found client-side noise of 20-40 ms on the shared VM
// while the loop's longest pass was under 10 ms).
// REQUIRES: loop thread.
#pragma once

#include <uv.h>

#include <cstdint>

#include "reactor/histogram.h"
#include "reactor/uvkj/uv_handle.h"

namespace dispatch::reactor {

class LoopPassMeter {
 public:
  // Turns on the loop's idle-time accounting and starts measuring.
  explicit LoopPassMeter(uv_loop_t* loop);
  LoopPassMeter(const LoopPassMeter&) = delete;
  LoopPassMeter& operator=(const LoopPassMeter&) = delete;

  uint64_t passes() const { return passes_; }
  uint64_t max_busy_ns() const { return max_busy_ns_; }
  uint64_t passes_over_10ms() const { return passes_over_10ms_; }
  // Busy time per pass (seconds).
  const Histogram& busy_seconds() const { return busy_seconds_; }

 private:
  static void OnPrepare(uv_prepare_t* handle);
  void Measure();

  uv_loop_t* const loop_;
  uvkj::UvHandle<uv_prepare_t> prepare_;
  uint64_t last_ns_ = 0;
  uint64_t last_idle_ns_ = 0;
  uint64_t passes_ = 0;
  uint64_t max_busy_ns_ = 0;
  uint64_t passes_over_10ms_ = 0;
  Histogram busy_seconds_{Histogram::SecondsBounds()};
};

}  // namespace dispatch::reactor
