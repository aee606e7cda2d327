// StuckClosureWatch: the closure watchdog's decision, as the reference
// coordinator's watchdog makes it: closures are stuck when some are running
// (assigned to workers) and no run has finished for `threshold_micros`. Pure:
// the reactor feeds it the effects of the updates it applies (a run whose
// outcome its worker reported is progress) and, from its housekeeping
// timer, the clock and the number of running closures; it answers when a stuck episode begins (once
// per episode: the caller logs it and counts it) and when it ends (a run finished, or none runs any
// more). Replay needs none of it: it holds no state of record.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "state/dispatcher_state.h"
#include "state/effects.h"

namespace dispatch::state {

class StuckClosureWatch {
 public:
  enum class Change {
    kNone,
    kBecameStuck,  // a new episode: tell it once
    kMovingAgain,  // the episode is over: a run finished, or none runs
  };

  // `threshold_micros` 0: the watch never raises.
  explicit StuckClosureWatch(int64_t threshold_micros) : threshold_micros_(threshold_micros) {}

  // What an applied update did: a reported run (a closure finished, or
  // failed by the worker running it) is progress, at the update's time.
  void OnApplied(const Effects& effects);

  // The periodic check: `running` closures are assigned now.
  Change Check(int64_t now_micros, uint64_t running);

  bool stuck() const { return stuck_; }
  // Since when no run has finished while some ran (valid while stuck()).
  int64_t quiet_since_micros() const { return quiet_since_micros_; }
  int64_t threshold_micros() const { return threshold_micros_; }
  // Episodes raised so far.
  uint64_t episodes() const { return episodes_; }

 private:
  const int64_t threshold_micros_;
  bool stuck_ = false;
  bool running_ = false;            // some closure ran at the last check
  int64_t quiet_since_micros_ = 0;  // start of the current stretch without a finished run
  int64_t last_finish_micros_ = 0;  // time of the last worker outcome applied
  bool finished_since_check_ = false;
  uint64_t episodes_ = 0;
};

// One running closure as the watchdog tells it.
struct RunningClosure {
  uint64_t closure_id = 0;
  uint64_t worker_id = 0;
  std::string worker_address;  // empty if the worker is gone
  std::string function;
  uint32_t attempt = 0;
};

// Up to `max` of the running closures, lowest ids (the earliest scheduled)
// first; O(max).
std::vector<RunningClosure> ListRunning(const DispatcherState& state, size_t max);

}  // namespace dispatch::state
