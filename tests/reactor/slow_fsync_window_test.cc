#include "reactor/slow_fsync_window.h"

#include <gtest/gtest.h>

namespace dispatch::reactor {
namespace {

constexpr uint64_t kBoundNs = 1000000;  // 1 ms

TEST(SlowFsyncWindow, QuickUntilTwoRememberedFsyncsWereSlow) {
  SlowFsyncWindow window(kBoundNs, 4);
  EXPECT_TRUE(window.quick()) << "nothing seen yet";
  window.Add(kBoundNs);  // at the bound: not slow
  window.Add(kBoundNs + 1);
  EXPECT_EQ(window.slow_count(), 1u);
  EXPECT_TRUE(window.quick());
  window.Add(5 * kBoundNs);
  EXPECT_EQ(window.slow_count(), 2u);
  EXPECT_FALSE(window.quick());
}

TEST(SlowFsyncWindow, SlowFsyncsAreForgottenOnceAsManyQuickOnesAsItHoldsFollow) {
  constexpr size_t kSize = 8;
  SlowFsyncWindow window(kBoundNs, kSize);
  window.Add(2 * kBoundNs);
  window.Add(2 * kBoundNs);
  ASSERT_FALSE(window.quick());
  // Quick ones fill the free slots first: nothing slow leaves yet.
  for (size_t i = 0; i + 1 < kSize - 1; ++i) {
    window.Add(10);
    EXPECT_FALSE(window.quick()) << "after " << i + 1 << " quick fsyncs";
  }
  window.Add(10);  // the first slow one leaves
  EXPECT_EQ(window.slow_count(), 1u);
  EXPECT_TRUE(window.quick());
  window.Add(10);  // the second
  EXPECT_EQ(window.slow_count(), 0u);
}

TEST(SlowFsyncWindow, AnEmptyWindowIsAlwaysQuick) {
  SlowFsyncWindow window(0, 0);
  for (int i = 0; i < 3; ++i) window.Add(kBoundNs);
  EXPECT_EQ(window.slow_count(), 0u);
  EXPECT_TRUE(window.quick());
}

}  // namespace
}  // namespace dispatch::reactor
