// Backoff: delays grow, stay within [d/2, d] and the cap, restart after a
// success, and depend only on the seed.
#include "clients/backoff.h"

#include <gtest/gtest.h>

#include "tests/clients/client_test_support.h"

namespace dispatch::clients {
namespace {

TEST(Backoff, DelaysDoubleWithinJitterBoundsUpToTheCap) {
  Backoff backoff(100, 1000, testing::TestSeed());
  uint64_t ceiling = 100;
  for (int i = 0; i < 40; ++i) {
    uint64_t delay = backoff.NextDelayMs();
    EXPECT_GE(delay, ceiling / 2) << "attempt " << i;
    EXPECT_LE(delay, ceiling) << "attempt " << i;
    ceiling = std::min<uint64_t>(ceiling * 2, 1000);
  }
}

TEST(Backoff, ResetStartsFromTheInitialDelayAgain) {
  Backoff backoff(50, 5000, testing::TestSeed());
  for (int i = 0; i < 10; ++i) backoff.NextDelayMs();
  backoff.Reset();
  EXPECT_EQ(backoff.attempt(), 0u);
  EXPECT_LE(backoff.NextDelayMs(), 50u);
}

TEST(Backoff, TheSameSeedGivesTheSameDelays) {
  uint64_t seed = testing::TestSeed();
  Backoff a(10, 10000, seed), b(10, 10000, seed);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.NextDelayMs(), b.NextDelayMs());
}

}  // namespace
}  // namespace dispatch::clients
