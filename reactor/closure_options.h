// Settings of closure coordination (the ClusterCoordinator half): every one is
// a `dispatcher` flag. Defaults follow the reference where it has one
// (queue size, transient threshold, start delays); the rest are ours.
#pragma once

#include <cstdint>

#include "state/closure_planner.h"

namespace dispatch::reactor {

struct ClosureOptions {
  // Queued closures past which `schedule` waits (back-pressure).
  uint64_t max_queued_closures = 256 * 1024;
  // Attempts, transient retries and the staggered start: the planner's
  // settings (state/closure_planner.h).
  state::ClosurePolicy policy;
  // Closures are pushed to workers at once, before their assignment commits,
  // and the commit waits up to this long for the workers' reports, so that
  // the assignment and the result share one fsync (0: push only after the
  // assignment commits). Safe because a run whose assignment was never
  // committed is simply run again (at-least-once), and its report cannot
  // reach a restarted dispatcher (it dies with the connection).
  uint64_t commit_hold_us = 400;
  // Most closures one `schedule` call may carry.
  uint64_t max_closures_per_call = 65536;
  // Most outcomes one `awaitResults` reply carries.
  uint64_t max_results_per_call = 65536;
  // Largest closure result accepted. A larger one fails its closure with an
  // error naming this limit (not retried: it would be as large again).
  // Workers are told it in every heartbeat reply and turn a larger result
  // into that error themselves, so they never send a message the connection
  // limit (--max-message-bytes) would refuse. Must leave room in a message:
  // at most half of max_message_bytes (the flag's 0 picks 32 MiB or that).
  uint64_t max_result_bytes = 32ull << 20;
  // Result bytes one `awaitResults` or `getOutcomes` reply carries: outcomes
  // are added while they fit (the first always goes, whatever its size).
  // Results are read back from the store for each reply, so this bounds the
  // memory a fetch takes as well as the reply. 4 MiB rather than 16: the
  // reply's fresh segment is zeroed on the loop, and smaller replies overlap
  // better with the client's work (`dispatch-bench results`, 2,000 x 256 KiB:
  // fetch 312-347 MiB/s and loop passes of at most 6 ms, against 227-263
  // MiB/s and up to 15 ms with 16 MiB; session note 42).
  uint64_t max_result_bytes_per_call = 4ull << 20;
};

}  // namespace dispatch::reactor
