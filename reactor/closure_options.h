// Settings of closure coordination (the ClusterCoordinator half): every one is
// a `dispatcher` flag. Defaults follow the reference where it has one
// (queue size, transient threshold, start delays); the rest are ours.
#pragma once

#include <cstdint>

namespace dispatch::reactor {

struct ClosureOptions {
  // Queued closures past which `schedule` waits (back-pressure).
  uint64_t max_queued_closures = 256 * 1024;
  // Runs after which a closure whose worker keeps failing is failed instead
  // of retried (0: retry forever, as the reference does).
  uint64_t max_closure_attempts = 3;
  // Transient errors a closure may report and still be retried elsewhere;
  // the next one fails it.
  uint64_t transient_retries = 3;
  // Staggered start: the i-th worker to attach gets closures only after
  // min(i * delay, max) (or `delay` when max is 0), as the reference's
  // start-delay settings do.
  uint64_t start_delay_ms = 0;
  uint64_t start_delay_max_ms = 0;
  // Most closures one `schedule` call may carry.
  uint64_t max_closures_per_call = 65536;
  // Most outcomes one `awaitResults` reply carries.
  uint64_t max_results_per_call = 65536;
};

}  // namespace dispatch::reactor
