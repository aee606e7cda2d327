// UvTimer: kj::Timer on one uv_timer_t, driven by UvAsyncIo::Run().
#include <gtest/gtest.h>
#include <kj/debug.h>
#include <kj/vector.h>

#include <algorithm>
#include <random>
#include <vector>

#include "tests/uvkj/test_util.h"

namespace dispatch::uvkj::testing {
namespace {

TEST(UvTimer, AfterDelayResolvesWhileRunDrives) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    kj::TimePoint start = io.timer().now();
    Outcome<void> fired;
    auto waiting = Track(io.timer().afterDelay(20 * kj::MILLISECONDS), fired);
    ASSERT_TRUE(WaitUntil([&] { return fired.done; }, LoopPasses(io)));
    EXPECT_TRUE(fired.error == nullptr);
    // Never early: the timer's own clock has moved past the deadline.
    EXPECT_GE(io.timer().now() - start, 20 * kj::MILLISECONDS);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvTimer, ShorterDelayFiresFirst) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    std::vector<int> order;
    auto slow = io.timer()
                    .afterDelay(40 * kj::MILLISECONDS)
                    .then([&] { order.push_back(40); })
                    .eagerlyEvaluate(nullptr);
    auto fast = io.timer()
                    .afterDelay(10 * kj::MILLISECONDS)
                    .then([&] { order.push_back(10); })
                    .eagerlyEvaluate(nullptr);
    auto same = io.timer()
                    .afterDelay(10 * kj::MILLISECONDS)
                    .then([&] { order.push_back(11); })
                    .eagerlyEvaluate(nullptr);
    ASSERT_TRUE(WaitUntil([&] { return order.size() == 3; }, LoopPasses(io)));
    EXPECT_EQ(order, (std::vector<int>{10, 11, 40}));
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvTimer, CancelledDelayDoesNotFire) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    bool cancelled_fired = false;
    {
      auto cancelled = io.timer()
                           .afterDelay(5 * kj::MILLISECONDS)
                           .then([&] { cancelled_fired = true; })
                           .eagerlyEvaluate(nullptr);
    }  // dropped before it was due
    Outcome<void> later;
    auto waiting = Track(io.timer().afterDelay(30 * kj::MILLISECONDS), later);
    ASSERT_TRUE(WaitUntil([&] { return later.done; }, LoopPasses(io)));
    EXPECT_FALSE(cancelled_fired);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvTimer, PendingKjTimerKeepsRunDefaultAliveUntilItFires) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    bool fired = false;
    auto waiting = io.timer()
                       .afterDelay(20 * kj::MILLISECONDS)
                       .then([&] { fired = true; })
                       .eagerlyEvaluate(nullptr);
    // Nothing else is active: without the timer Run() would return at once.
    io.Run(UV_RUN_DEFAULT);
    EXPECT_TRUE(fired);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvTimer, TimeoutAfterRejectsAStuckPromise) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    auto paf = kj::newPromiseAndFulfiller<void>();
    Outcome<void> result;
    auto waiting =
        Track(io.timer().timeoutAfter(10 * kj::MILLISECONDS, kj::mv(paf.promise)), result);
    ASSERT_TRUE(WaitUntil([&] { return result.done; }, LoopPasses(io)));
    KJ_IF_MAYBE (e, result.error) {
      EXPECT_EQ(e->getType(), kj::Exception::Type::OVERLOADED);
    } else {
      FAIL() << "timeoutAfter did not reject";
    }
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvTimer, ManyTimersFireInDeadlineOrder) {
  Bridge bridge;
  auto& io = bridge.io();
  uint64_t seed = TestSeed();
  {
    std::mt19937_64 rng(seed);
    constexpr int kTimers = 200;
    std::vector<int64_t> fired_delays;
    kj::Vector<kj::Promise<void>> waiting;
    for (int i = 0; i < kTimers; ++i) {
      // From 1 ms: a 0 ms timer is due at creation and its continuation is
      // queued behind ones that libuv's first timer pass fires (that ordering is KJ's, not a
      // deadline one).
      int64_t delay = 1 + rng() % 50;
      waiting.add(io.timer()
                      .afterDelay(delay * kj::MILLISECONDS)
                      .then([&, delay] { fired_delays.push_back(delay); })
                      .eagerlyEvaluate(nullptr));
    }
    ASSERT_TRUE(WaitUntil([&] { return fired_delays.size() == kTimers; }, LoopPasses(io)));
    EXPECT_TRUE(std::is_sorted(fired_delays.begin(), fired_delays.end()))
        << ::testing::PrintToString(fired_delays);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

}  // namespace
}  // namespace dispatch::uvkj::testing
