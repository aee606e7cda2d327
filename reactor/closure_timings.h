// ClosureTimings: how long closures wait in the queue and how long they run,
// as the reference coordinator's `queued_closure` and `closure_execution`
// timers do, observed from the effects of the updates the dispatcher applies
// (the commit pipeline's applied observer) with the loop's monotonic clock. Queue wait runs from a
// closure's schedule (waiting for inputs included) or put-back to its
// assignment; execution from its assignment to its outcome (finished or
// failed by its worker). Closures queued or running before this process
// started are not timed. One map holds each timed closure's step and since
// when (one node per closure for its whole life, changed in place as it
// moves): at most max_tracked closures (more are not timed, and counted); a
// closure leaves it when it ends (finished, failed or cancelled) or is released.
// REQUIRES: loop thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "reactor/histogram.h"
#include "state/effects.h"

namespace dispatch::reactor {

class ClosureTimings {
 public:
  static constexpr size_t kMaxTracked = 1u << 20;

  explicit ClosureTimings(size_t max_tracked = kMaxTracked) : max_tracked_(max_tracked) {}

  // What an applied update did; `now_ns`: the state's Clock (monotonic)
  // when it was applied.
  void Observe(const state::Effects& effects, uint64_t now_ns);

  const Histogram& queue_wait() const { return queue_wait_; }
  const Histogram& execution() const { return execution_; }
  uint64_t untracked() const { return untracked_; }
  size_t tracked() const { return since_.size(); }
  // Monotonic time when the closure's current run was assigned; nullopt when it
  // does not run or is not timed.
  std::optional<uint64_t> RunningSinceNs(uint64_t closure_id) const {
    auto it = since_.find(closure_id);
    if (it == since_.end() || !it->second.running) return std::nullopt;
    return it->second.ns;
  }

 private:
  struct Since {
    uint64_t ns;   // monotonic time when it was queued, or assigned
    bool running;  // assigned (else queued)
  };
  void Queued(uint64_t closure_id, uint64_t now_ns);
  void Assigned(uint64_t closure_id, uint64_t now_ns);
  void Ended(uint64_t closure_id, uint64_t now_ns, bool observe);

  const size_t max_tracked_;
  std::unordered_map<uint64_t, Since> since_;
  Histogram queue_wait_{Histogram::SecondsBounds()};
  Histogram execution_{Histogram::SecondsBounds()};
  uint64_t untracked_ = 0;
};

}  // namespace dispatch::reactor
