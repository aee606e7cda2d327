// ClosureTimings: queue wait from schedule or put-back to assignment,
// execution from assignment to the worker's outcome, and its bound.
#include "reactor/closure_timings.h"

#include <gtest/gtest.h>

#include <vector>

namespace dispatch::reactor {
namespace {

constexpr uint64_t kMs = 1000000;

// The effects of the updates the tests stand for (state/effects.h).
class Updates {
 public:
  const state::Effects& Scheduled(std::vector<uint64_t> ids) {
    effects_.Clear();
    effects_.scheduled = ids;
    effects_.queued = ids;
    return effects_;
  }
  const state::Effects& Assigned(std::vector<uint64_t> ids) {
    effects_.Clear();
    for (uint64_t id : ids) effects_.runs_started.push_back({id, 1, 1});
    effects_.queue_shrank = true;
    return effects_;
  }
  const state::Effects& Finished(std::vector<uint64_t> ids) {
    effects_.Clear();
    for (uint64_t id : ids) {
      effects_.runs_ended.push_back({id, 1, 1, state::ClosureState::FINISHED, /*reported=*/true});
      effects_.ended.push_back({id, 7, state::ClosureState::FINISHED});
    }
    return effects_;
  }
  const state::Effects& PutBack(uint64_t id) {
    effects_.Clear();
    effects_.runs_ended.push_back({id, 1, 1, state::ClosureState::QUEUED, /*reported=*/false});
    effects_.put_back.push_back({id, 1, false});
    effects_.queued.push_back(id);
    return effects_;
  }
  const state::Effects& Cancelled(uint64_t id, bool running) {
    effects_.Clear();
    if (running) effects_.runs_ended.push_back({id, 1, 1, state::ClosureState::CANCELLED, false});
    effects_.ended.push_back({id, 7, state::ClosureState::CANCELLED});
    return effects_;
  }

 private:
  state::Effects effects_;
};

TEST(ClosureTimings, TimesTheQueueFromScheduleOrPutBackAndTheRunFromAssignment) {
  ClosureTimings timings;
  Updates u;
  timings.Observe(u.Scheduled({1, 2}), 0);
  timings.Observe(u.Assigned({1}), 3 * kMs);
  timings.Observe(u.Finished({1}), 10 * kMs);
  EXPECT_EQ(timings.queue_wait().count(), 1u);
  EXPECT_NEAR(timings.queue_wait().sum(), 0.003, 1e-9);
  EXPECT_EQ(timings.execution().count(), 1u);
  EXPECT_NEAR(timings.execution().sum(), 0.007, 1e-9);
  // Closure 2 runs, its worker dies, it queues again and runs elsewhere.
  timings.Observe(u.Assigned({2}), 20 * kMs);
  timings.Observe(u.PutBack(2), 25 * kMs);
  timings.Observe(u.Assigned({2}), 26 * kMs);
  EXPECT_EQ(timings.queue_wait().count(), 3u);
  EXPECT_NEAR(timings.queue_wait().sum(), 0.003 + 0.020 + 0.001, 1e-9);
  EXPECT_EQ(timings.execution().count(), 1u);  // the lost run is no execution
  EXPECT_EQ(timings.tracked(), 1u);            // closure 2, running
}

TEST(ClosureTimings, ACancelledRunIsNoExecutionAndIsForgotten) {
  ClosureTimings timings;
  Updates u;
  timings.Observe(u.Scheduled({1, 2}), 0);
  timings.Observe(u.Assigned({1}), kMs);
  timings.Observe(u.Cancelled(1, /*running=*/true), 2 * kMs);
  timings.Observe(u.Cancelled(2, /*running=*/false), 3 * kMs);
  EXPECT_EQ(timings.execution().count(), 0u);
  EXPECT_EQ(timings.queue_wait().count(), 1u);
  EXPECT_EQ(timings.tracked(), 0u);
}

TEST(ClosureTimings, ClosuresPastTheBoundAreNotTimedAndAreCounted) {
  ClosureTimings timings(/*max_tracked=*/2);
  Updates u;
  timings.Observe(u.Scheduled({1, 2, 3}), 0);
  EXPECT_EQ(timings.untracked(), 1u);
  EXPECT_EQ(timings.tracked(), 2u);
  timings.Observe(u.Assigned({1, 2, 3}), kMs);
  EXPECT_EQ(timings.queue_wait().count(), 2u);
  EXPECT_EQ(timings.untracked(), 2u);  // 3 was not timed in the queue nor as a run
  timings.Observe(u.Finished({1, 2, 3}), 2 * kMs);
  EXPECT_EQ(timings.execution().count(), 2u);
  EXPECT_EQ(timings.tracked(), 0u);
}

}  // namespace
}  // namespace dispatch::reactor
