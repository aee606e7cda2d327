#include "reactor/status_history.h"

namespace dispatch::reactor {

void StatusHistory::Sample(const StatusCounters& now) {
  const std::vector<uint64_t>& counts = now.commit_seconds->bucket_counts();
  if (!primed_) {
    primed_ = true;
  } else {
    const double elapsed = now.unix_seconds - last_seconds_;
    StatusSample sample;
    sample.unix_seconds = now.unix_seconds;
    if (elapsed > 0) {
      sample.closures_finished_per_second =
          static_cast<double>(now.closures_finished - last_closures_finished_) / elapsed;
      sample.heartbeats_per_second = static_cast<double>(now.heartbeats - last_heartbeats_) / elapsed;
    }
    std::vector<uint64_t> delta(counts.size(), 0);
    uint64_t commits = 0;
    for (size_t i = 0; i < counts.size() && i < last_commit_counts_.size(); ++i) {
      delta[i] = counts[i] - last_commit_counts_[i];
      commits += delta[i];
    }
    const auto& bounds = now.commit_seconds->upper_bounds();
    sample.commit_p50_ms = Histogram::Quantile(bounds, delta, 0.5) * 1e3;
    sample.commit_p99_ms = Histogram::Quantile(bounds, delta, 0.99) * 1e3;
    if (elapsed > 0) sample.commits_per_second = static_cast<double>(commits) / elapsed;
    sample.loop_lag_ms = static_cast<double>(now.loop_lag_max_us) * 1e-3;
    if (ring_.size() < kCapacity) {
      ring_.push_back(sample);
    } else {
      ring_[next_] = sample;
      next_ = (next_ + 1) % kCapacity;
      ++overwritten_;
    }
  }
  last_seconds_ = now.unix_seconds;
  last_closures_finished_ = now.closures_finished;
  last_heartbeats_ = now.heartbeats;
  last_commit_counts_ = counts;
}

std::vector<StatusSample> StatusHistory::Samples() const {
  std::vector<StatusSample> out;
  out.reserve(ring_.size());
  for (size_t i = 0; i < ring_.size(); ++i) out.push_back(ring_[(next_ + i) % ring_.size()]);
  return out;
}

}  // namespace dispatch::reactor
