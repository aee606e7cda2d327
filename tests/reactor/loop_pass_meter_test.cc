// LoopPassMeter: a pass that keeps the loop busy counts as busy for at least
// as long as it ran; a pass that waits for I/O or a timer does not count its
// wait (the loop's idle-time accounting is on).
#include "reactor/loop_pass_meter.h"

#include <gtest/gtest.h>
#include <uv.h>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::reactor {
namespace {

struct Timers {
  uint64_t spin_ns = 0;
  int fired = 0;
};

// Runs its pass for `spin_ns` of CPU (no sleep: the loop must be busy).
void SpinOnTimer(uv_timer_t* handle) {
  auto* timers = static_cast<Timers*>(handle->data);
  const uint64_t until = uv_hrtime() + timers->spin_ns;
  while (uv_hrtime() < until) {
  }
  ++timers->fired;
}

TEST(LoopPassMeter, ABusyPassCountsAtLeastItsWorkAndAWaitDoesNotCount) {
  uvkj::UvLoop loop;
  LoopPassMeter meter(loop.get());
  Timers timers;
  timers.spin_ns = 25'000'000;  // 25 ms
  {
    // The first timer waits 50 ms (idle), then spins 25 ms in its callback.
    uvkj::UvHandle<uv_timer_t> timer(loop.get(), &timers, uv_timer_init);
    ASSERT_EQ(uv_timer_start(timer.get(), &SpinOnTimer, 50, 0), 0);
    uv_run(loop.get(), UV_RUN_DEFAULT);
    ASSERT_EQ(timers.fired, 1);
    // One more pass, so the meter closes the one that spun.
    uvkj::UvHandle<uv_timer_t> next(loop.get(), &timers, uv_timer_init);
    timers.spin_ns = 0;
    ASSERT_EQ(uv_timer_start(next.get(), &SpinOnTimer, 1, 0), 0);
    uv_run(loop.get(), UV_RUN_DEFAULT);
    ASSERT_EQ(timers.fired, 2);
  }
  EXPECT_GE(meter.passes(), 2u);
  EXPECT_GE(meter.max_busy_ns(), 25'000'000u) << "the spin was not counted as busy";
  EXPECT_GE(meter.passes_over_10ms(), 1u);
  EXPECT_EQ(meter.busy_seconds().count(), meter.passes());
  // The 50 ms wait went to the loop's idle time, which the meter subtracts:
  // counted, that pass would have been at least 50 + 25 ms.
  EXPECT_GE(uv_metrics_idle_time(loop.get()), 40'000'000u);
  EXPECT_LT(meter.max_busy_ns(), 75'000'000u) << "the wait was counted as busy";
}

}  // namespace
}  // namespace dispatch::reactor
