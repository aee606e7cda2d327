// Latency samples and the figures the benchmarks print: percentiles and
// rates. Samples are kept whole (a few hundred thousand at most) so the
// percentiles are exact, not estimated.
#pragma once

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dispatch::bench {

// CLOCK_MONOTONIC in nanoseconds: steady_clock's and uv_hrtime()'s clock, so
// the benches' timestamps line up with the dispatcher's and with `perf`'s
// (-k CLOCK_MONOTONIC).
inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

class LatencySamples {
 public:
  void Reserve(size_t n) { ns_.reserve(n); }
  void Add(uint64_t ns) { ns_.push_back(ns); }
  size_t count() const { return ns_.size(); }

  // p in [0, 100]; microseconds. REQUIRES: count() > 0.
  double PercentileMicros(double p) {
    std::sort(ns_.begin(), ns_.end());
    size_t index = static_cast<size_t>(p / 100.0 * (ns_.size() - 1) + 0.5);
    return ns_[std::min(index, ns_.size() - 1)] / 1000.0;
  }

 private:
  std::vector<uint64_t> ns_;
};

// The median of a few runs' figures: robust to one noisy run.
inline double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

}  // namespace dispatch::bench
