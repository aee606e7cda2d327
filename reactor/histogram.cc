#include "reactor/histogram.h"

#include <algorithm>

#include <kj/debug.h>

namespace dispatch::reactor {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  KJ_REQUIRE(!bounds_.empty(), "a histogram needs at least one bucket bound");
  for (size_t i = 1; i < bounds_.size(); ++i) {
    KJ_REQUIRE(bounds_[i - 1] < bounds_[i], "histogram bounds must increase", i);
  }
}

std::vector<double> Histogram::SecondsBounds() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
          0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10};
}

std::vector<double> Histogram::CountBounds() {
  std::vector<double> bounds;
  for (double b = 1; b <= 65536; b *= 2) bounds.push_back(b);
  return bounds;
}

void Histogram::Observe(double value) {
  // The first bucket whose bound is >= value (Prometheus buckets are "le").
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[i];
  ++count_;
  sum_ += value;
}

double Histogram::Quantile(const std::vector<double>& upper_bounds, const std::vector<uint64_t>& counts,
                           double q) {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0 || upper_bounds.empty()) return 0;
  const double rank = q * static_cast<double>(total);
  uint64_t below = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    if (static_cast<double>(below + counts[i]) >= rank) {
      if (i >= upper_bounds.size()) return upper_bounds.back();
      double lower = i == 0 ? 0 : upper_bounds[i - 1];
      double fraction = (rank - static_cast<double>(below)) / static_cast<double>(counts[i]);
      return lower + (upper_bounds[i] - lower) * std::clamp(fraction, 0.0, 1.0);
    }
    below += counts[i];
  }
  return upper_bounds.back();
}

}  // namespace dispatch::reactor
