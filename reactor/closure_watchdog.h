// ClosureWatchdog: carries out the stuck-closure watch (the pure decision is
// state/stuck_closures.h) from the housekeeping timer. When closures run and
// none has finished for --stuck-closure-warning-ms, it logs one warning for
// the episode naming what runs (the first kMaxListed closures by id: id,
// function, worker, attempt, how long it has run) and counts the episode;
// when a run finishes again, or none runs, it logs that at info.
// REQUIRES: loop thread only.
#pragma once

#include <cstdint>
#include <string>

#include "reactor/closure_timings.h"
#include "state/dispatcher_state.h"
#include "state/effects.h"
#include "state/stuck_closures.h"

namespace dispatch::reactor {

class ClosureWatchdog {
 public:
  // Closures a warning names at most (the rest are counted in it).
  static constexpr size_t kMaxListed = 10;

  // `threshold_ms` 0: off.
  explicit ClosureWatchdog(uint64_t threshold_ms)
      : watch_(static_cast<int64_t>(threshold_ms) * 1000) {}

  // What every applied update did (the commit pipeline's applied observer).
  void OnApplied(const state::Effects& effects) { watch_.OnApplied(effects); }
  // The periodic check. `now_micros`: the clock the updates are stamped
  // with; `now_ns`: the same Clock's
  // monotonic time, which the run times `timings` holds are read from.
  void Check(const state::DispatcherState& state, int64_t now_micros,
             const ClosureTimings& timings, uint64_t now_ns);

  // Stuck episodes warned about since the process started.
  uint64_t episodes() const { return watch_.episodes(); }
  // Closures running in the current episode (as of its last check); 0 when
  // none is on.
  uint64_t stuck_closures() const { return watch_.stuck() ? stuck_running_ : 0; }
  // The text of the last warning (for tests and tools); empty before one.
  const std::string& last_warning() const { return last_warning_; }

 private:
  std::string Describe(const state::DispatcherState& state, int64_t now_micros, uint64_t running,
                       const ClosureTimings& timings, uint64_t now_ns) const;

  state::StuckClosureWatch watch_;
  uint64_t stuck_running_ = 0;
  std::string last_warning_;
};

}  // namespace dispatch::reactor
