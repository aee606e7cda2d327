#include "reactor/closure_timings.h"

namespace dispatch::reactor {

void ClosureTimings::Queued(uint64_t closure_id, uint64_t now_ns) {
  auto it = since_.find(closure_id);
  if (it != since_.end()) {
    it->second = {now_ns, false};  // put back
  } else if (since_.size() >= max_tracked_) {
    ++untracked_;
  } else {
    since_.emplace(closure_id, Since{now_ns, false});
  }
}

void ClosureTimings::Assigned(uint64_t closure_id, uint64_t now_ns) {
  auto it = since_.find(closure_id);
  if (it == since_.end()) {
    if (since_.size() >= max_tracked_) {
      ++untracked_;
      return;
    }
    it = since_.emplace(closure_id, Since{now_ns, true}).first;
  } else if (!it->second.running) {
    queue_wait_.Observe(static_cast<double>(now_ns - it->second.ns) * 1e-9);
  }
  it->second = {now_ns, true};
}

void ClosureTimings::Ended(uint64_t closure_id, uint64_t now_ns, bool observe) {
  auto it = since_.find(closure_id);
  if (it == since_.end()) return;
  if (observe && it->second.running)
    execution_.Observe(static_cast<double>(now_ns - it->second.ns) * 1e-9);
  since_.erase(it);
}

void ClosureTimings::Observe(const state::Effects& effects, uint64_t now_ns) {
  // A closure's queue wait starts at its schedule (waiting for inputs
  // included), not when its inputs let it into the queue.
  for (uint64_t id : effects.scheduled) Queued(id, now_ns);
  for (const state::PutBack& put_back : effects.put_back) Queued(put_back.closure_id, now_ns);
  for (const state::RunStarted& run : effects.runs_started) Assigned(run.closure_id, now_ns);
  // A run its worker reported on is an execution; one the dispatcher ended
  // (cancelled, timed out, put back) is not.
  for (const state::RunEnded& run : effects.runs_ended) {
    if (run.reported) Ended(run.closure_id, now_ns, true);
  }
  for (const state::ClosureEnded& ended : effects.ended) Ended(ended.closure_id, now_ns, false);
  for (uint64_t id : effects.released) Ended(id, now_ns, false);
}

}  // namespace dispatch::reactor
