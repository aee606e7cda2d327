// StatusHistory: the last minutes of a few rates for the status page's plots,
// one sample a second in a fixed ring (kCapacity samples; the oldest is
// overwritten and counted). Sampling reads counters the loop already keeps
// and diffs them with the previous sample, so it costs a few arithmetic
// operations and never grows with the state.
// REQUIRES: loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "reactor/histogram.h"

namespace dispatch::reactor {

struct StatusSample {
  double unix_seconds = 0;
  double closures_finished_per_second = 0;  // closure outcomes accepted from workers
  double heartbeats_per_second = 0;         // worker heartbeats
  double commit_p50_ms = 0;                 // group commits in the interval
  double commit_p99_ms = 0;
  double commits_per_second = 0;
  double loop_lag_ms = 0;                   // the largest housekeeping-timer lateness
};

// The cumulative counters a sample is the difference of.
struct StatusCounters {
  double unix_seconds = 0;
  uint64_t closures_finished = 0;
  uint64_t heartbeats = 0;
  const Histogram* commit_seconds = nullptr;  // REQUIRES: non-null
  uint64_t loop_lag_max_us = 0;               // the largest lateness since the last sample
};

class StatusHistory {
 public:
  static constexpr size_t kCapacity = 600;  // ten minutes of one-second samples

  // Appends a sample made of the difference between `now` and the previous
  // call's counters (the first call only remembers them).
  void Sample(const StatusCounters& now);

  // Oldest first; at most kCapacity.
  std::vector<StatusSample> Samples() const;
  uint64_t overwritten() const { return overwritten_; }

 private:
  std::vector<StatusSample> ring_;
  size_t next_ = 0;  // where the next sample goes once the ring is full
  uint64_t overwritten_ = 0;
  bool primed_ = false;
  double last_seconds_ = 0;
  uint64_t last_closures_finished_ = 0;
  uint64_t last_heartbeats_ = 0;
  std::vector<uint64_t> last_commit_counts_;
};

}  // namespace dispatch::reactor
