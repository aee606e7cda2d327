#include "state/stuck_closures.h"

#include <algorithm>

namespace dispatch::state {

void StuckClosureWatch::OnApplied(const Effects& effects) {
  // Failed by the dispatcher (a deadline, attempts exhausted) or put back
  // says nothing of the workers: only a reported run is progress.
  const bool finished = std::any_of(effects.runs_ended.begin(), effects.runs_ended.end(),
                                    [](const RunEnded& run) { return run.reported; });
  if (!finished) return;
  finished_since_check_ = true;
  last_finish_micros_ = std::max(last_finish_micros_, effects.time_micros);
}

StuckClosureWatch::Change StuckClosureWatch::Check(int64_t now_micros, uint64_t running) {
  const bool was_stuck = stuck_;
  if (running == 0) {
    running_ = false;
    finished_since_check_ = false;
    stuck_ = false;
    return was_stuck ? Change::kMovingAgain : Change::kNone;
  }
  if (!running_) {
    // Closures began to run since the last check: the quiet stretch starts
    // now (at worst one check late, which only delays the warning).
    running_ = true;
    quiet_since_micros_ = now_micros;
  }
  if (finished_since_check_) {
    finished_since_check_ = false;
    quiet_since_micros_ = std::max(quiet_since_micros_, last_finish_micros_);
    stuck_ = false;
    if (was_stuck) return Change::kMovingAgain;
  }
  if (stuck_ || threshold_micros_ <= 0) return Change::kNone;
  if (now_micros - quiet_since_micros_ < threshold_micros_) return Change::kNone;
  stuck_ = true;
  ++episodes_;
  return Change::kBecameStuck;
}

std::vector<RunningClosure> ListRunning(const DispatcherState& state, size_t max) {
  std::vector<RunningClosure> out;
  for (const Closure* closure : state.ClosuresInState(ClosureState::ASSIGNED, max)) {
    RunningClosure r;
    r.closure_id = closure->id;
    r.worker_id = closure->worker_id;
    if (const Worker* worker = state.FindWorker(closure->worker_id)) r.worker_address = worker->address;
    r.function = closure->function_name;
    r.attempt = closure->attempts;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace dispatch::state
