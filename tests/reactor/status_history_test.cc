// StatusHistory (the status page's ring of one-second samples) and the
// Histogram quantiles it reads: the ring is bounded and says what it dropped.
#include <gtest/gtest.h>

#include "reactor/histogram.h"
#include "reactor/status_history.h"

namespace dispatch::reactor {
namespace {

TEST(Histogram, ObservationsLandInTheFirstBucketAtOrAboveThem) {
  Histogram h({1, 2, 4});
  h.Observe(0.5);
  h.Observe(1);
  h.Observe(3);
  h.Observe(100);
  EXPECT_EQ(h.bucket_counts(), (std::vector<uint64_t>{2, 0, 1, 1}));
  EXPECT_EQ(h.count(), 4u);
  EXPECT_DOUBLE_EQ(h.sum(), 104.5);
}

TEST(Histogram, QuantilesInterpolateInsideTheirBucket) {
  const std::vector<double> bounds = {1, 2, 4};
  EXPECT_DOUBLE_EQ(Histogram::Quantile(bounds, {0, 0, 0, 0}, 0.5), 0);
  EXPECT_DOUBLE_EQ(Histogram::Quantile(bounds, {0, 10, 0, 0}, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(Histogram::Quantile(bounds, {10, 0, 10, 0}, 0.99), 2 + 2 * 0.98);
  // Past the last bound: the last bound, not infinity.
  EXPECT_DOUBLE_EQ(Histogram::Quantile(bounds, {0, 0, 0, 5}, 0.5), 4);
}

TEST(StatusHistory, SamplesAreRatesOfTheCountersSinceTheLastSample) {
  Histogram commits(Histogram::SecondsBounds());
  StatusHistory history;
  history.Sample({.unix_seconds = 100, .closures_finished = 10, .heartbeats = 4, .commit_seconds = &commits});
  EXPECT_TRUE(history.Samples().empty());  // the first call only remembers
  for (int i = 0; i < 20; ++i) commits.Observe(0.002);
  history.Sample({.unix_seconds = 102, .closures_finished = 30, .heartbeats = 8, .commit_seconds = &commits,
                  .loop_lag_max_us = 1500});
  auto samples = history.Samples();
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_DOUBLE_EQ(samples[0].closures_finished_per_second, 10);
  EXPECT_DOUBLE_EQ(samples[0].heartbeats_per_second, 2);
  EXPECT_DOUBLE_EQ(samples[0].commits_per_second, 10);
  EXPECT_GT(samples[0].commit_p50_ms, 1.0);
  EXPECT_LE(samples[0].commit_p99_ms, 2.5);
  EXPECT_DOUBLE_EQ(samples[0].loop_lag_ms, 1.5);
}

TEST(StatusHistory, TheRingKeepsTheNewestSamplesAndCountsWhatItDropped) {
  Histogram commits(Histogram::SecondsBounds());
  StatusHistory history;
  const size_t n = StatusHistory::kCapacity + 25;
  for (size_t i = 0; i <= n; ++i) {
    history.Sample({.unix_seconds = static_cast<double>(i), .commit_seconds = &commits});
  }
  auto samples = history.Samples();
  ASSERT_EQ(samples.size(), StatusHistory::kCapacity);
  EXPECT_EQ(history.overwritten(), 25u);
  EXPECT_DOUBLE_EQ(samples.front().unix_seconds, static_cast<double>(n - StatusHistory::kCapacity + 1));
  EXPECT_DOUBLE_EQ(samples.back().unix_seconds, static_cast<double>(n));
  for (size_t i = 1; i < samples.size(); ++i) EXPECT_LT(samples[i - 1].unix_seconds, samples[i].unix_seconds);
}

}  // namespace
}  // namespace dispatch::reactor
