// Histogram: counts of one quantity in fixed buckets, plain integers owned by
// the loop thread (no atomics: one thread observes and reads). The bucket
// bounds are fixed at construction, so memory never grows with observations;
// /metrics exposes them as a Prometheus histogram and the status page reads
// percentiles of the difference between two snapshots of the counts.
#pragma once

#include <cstdint>
#include <vector>

namespace dispatch::reactor {

class Histogram {
 public:
  // REQUIRES: `upper_bounds` is non-empty and strictly increasing; a value
  // above the last bound lands in the implicit +Inf bucket.
  explicit Histogram(std::vector<double> upper_bounds);

  // Latency bounds in seconds, 50 us .. 10 s (RPC calls, commits, slices).
  static std::vector<double> SecondsBounds();
  // Powers of two, 1 .. 65536 (records per commit and other counts).
  static std::vector<double> CountBounds();

  void Observe(double value);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Per bucket, not cumulative; one more entry than upper_bounds (+Inf).
  const std::vector<uint64_t>& bucket_counts() const { return counts_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

  // The q-quantile (0 < q <= 1) of observations whose per-bucket counts are
  // `counts` (e.g. the difference of two snapshots), interpolated linearly
  // inside its bucket; 0 when `counts` is empty or all zero. A quantile in
  // the +Inf bucket reports the last finite bound.
  static double Quantile(const std::vector<double>& upper_bounds, const std::vector<uint64_t>& counts,
                         double q);

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace dispatch::reactor
