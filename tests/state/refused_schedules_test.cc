#include "state/refused_schedules.h"

#include <gtest/gtest.h>

#include <string>

namespace dispatch::state {
namespace {

TEST(RefusedSchedules, AnyRequestIdOfARefusedCallFindsItsRefusalForItsCoordinatorOnly) {
  RefusedSchedules refused;
  refused.Record(7, {10, 11, 0}, {3, "boom"});
  const RefusedSchedules::Refusal* found = refused.Find(7, {99, 11});
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->closure_id, 3u);
  EXPECT_EQ(found->error, "boom");
  EXPECT_EQ(refused.Find(8, {10, 11}), nullptr);  // another coordinator's request ids
  EXPECT_EQ(refused.Find(7, {12}), nullptr);
  EXPECT_EQ(refused.Find(7, {0}), nullptr);  // zero names no request
  EXPECT_EQ(refused.requests(), 2u);
}

TEST(RefusedSchedules, TheFirstRefusalOfARequestIdStays) {
  RefusedSchedules refused;
  refused.Record(1, {5}, {1, "first"});
  refused.Record(1, {5, 6}, {2, "second"});
  EXPECT_EQ(refused.Find(1, {5})->error, "first");
  EXPECT_EQ(refused.Find(1, {6})->error, "second");
}

TEST(RefusedSchedules, OldestRefusalsGoFirstPastTheRequestBoundAndAreCounted) {
  RefusedSchedules refused(/*max_requests=*/4, /*max_error_bytes=*/1 << 20);
  refused.Record(1, {1, 2}, {1, "a"});
  refused.Record(1, {3, 4}, {2, "b"});
  refused.Record(1, {5}, {3, "c"});  // over 4: the oldest call's two go
  EXPECT_EQ(refused.Find(1, {1}), nullptr);
  EXPECT_EQ(refused.Find(1, {2}), nullptr);
  EXPECT_NE(refused.Find(1, {3}), nullptr);
  EXPECT_NE(refused.Find(1, {5}), nullptr);
  EXPECT_EQ(refused.requests(), 3u);
  EXPECT_EQ(refused.evicted(), 2u);
}

TEST(RefusedSchedules, ErrorTextIsBoundedTooButTheNewestRefusalAlwaysStays) {
  RefusedSchedules refused(/*max_requests=*/100, /*max_error_bytes=*/10);
  refused.Record(1, {1}, {1, std::string(8, 'x')});
  refused.Record(1, {2}, {2, std::string(8, 'y')});  // 16 bytes: the first goes
  EXPECT_EQ(refused.Find(1, {1}), nullptr);
  EXPECT_NE(refused.Find(1, {2}), nullptr);
  EXPECT_EQ(refused.error_bytes(), 8u);
  refused.Record(1, {3}, {3, std::string(50, 'z')});  // alone over the bound: kept
  EXPECT_NE(refused.Find(1, {3}), nullptr);
  EXPECT_EQ(refused.Find(1, {2}), nullptr);
  EXPECT_EQ(refused.evicted(), 2u);
}

}  // namespace
}  // namespace dispatch::state
