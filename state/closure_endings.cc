#include "state/closure_endings.h"

#include <algorithm>
#include <set>
#include <string>

namespace dispatch::state {

Result<CancelPlan> PlanCancel(const DispatcherState& state, uint64_t coordinator_id,
                              const std::vector<uint64_t>& closure_ids,
                              const SortedIdSet& releasing, const Stamp& stamp) {
  CancelPlan plan;
  plan.states.reserve(closure_ids.size());
  std::vector<uint64_t> cancel;
  std::set<uint64_t> seen;
  for (uint64_t id : closure_ids) {
    const Closure* closure = state.FindClosure(id);
    if (closure == nullptr || closure->coordinator_id != coordinator_id ||
        releasing.contains(id)) {
      return NotFoundError("closure " + std::to_string(id) + " of coordinator " +
                           std::to_string(coordinator_id) +
                           " is unknown (never scheduled, or released): nothing was cancelled");
    }
    if (IsClosureDone(closure->state)) {
      plan.states.push_back(closure->state);  // left as it is
      continue;
    }
    plan.states.push_back(ClosureState::CANCELLED);
    if (!seen.insert(id).second) continue;
    cancel.push_back(id);
    if (closure->state == ClosureState::ASSIGNED)
      plan.ending.running[closure->worker_id].push_back(id);
  }
  plan.ending.num_ended = cancel.size();
  AddCancelled(plan.ending.updates, stamp, cancel);
  return plan;
}

Result<EndingPlan> PlanCancelCoordinator(const DispatcherState& state, uint64_t coordinator_id,
                                         const Stamp& stamp) {
  if (coordinator_id == 0) return InvalidArgumentError("coordinator id 0 names no coordinator");
  const std::vector<const Closure*> unfinished = state.UnfinishedClosures(coordinator_id);
  if (unfinished.empty() && state.ClosuresForCoordinator(coordinator_id).empty()) {
    return NotFoundError("coordinator " + std::to_string(coordinator_id) +
                         " has no closures (none scheduled, or all released)");
  }
  std::vector<uint64_t> ids;
  ids.reserve(unfinished.size());
  for (const Closure* closure : unfinished) ids.push_back(closure->id);
  // Unfinished ones are never being released (only done ones are), so none
  // is in a release on its way.
  Result<CancelPlan> plan = PlanCancel(state, coordinator_id, ids, {}, stamp);
  if (!plan.ok()) return plan.status();
  return std::move(plan->ending);
}

std::string DeadlineExceededText(const Closure& closure) {
  const int64_t timeout_ms = (closure.deadline_micros - closure.scheduled_micros) / 1000;
  return "closure " + std::to_string(closure.id) + ": deadline exceeded: its timeout of " +
         std::to_string(timeout_ms) + " ms passed while it was " +
         (closure.state == ClosureState::ASSIGNED
              ? "running (attempt " + std::to_string(closure.attempts) + ")"
              : std::string("queued"));
}

EndingPlan PlanDeadlines(const DispatcherState& state, const Stamp& stamp) {
  EndingPlan plan;
  // A deadline failure cancels nothing, but fails the closure's waiting
  // dependants with it. A dependant always has a higher id than its inputs,
  // so failing the highest ids first keeps every planned item not done
  // when it applies (each with its own deadline error), and all are planned
  // against the state before any of them.
  std::vector<const Closure*> expired = state.ClosuresPastDeadline(stamp.time_micros);
  std::sort(expired.begin(), expired.end(),
            [](const Closure* a, const Closure* b) { return a->id > b->id; });
  for (const Closure* closure : expired) {
    if (closure->state == ClosureState::ASSIGNED)
      plan.running[closure->worker_id].push_back(closure->id);
    AddFailed(plan.updates, stamp, {closure->id, 0, closure->attempts},
              DeadlineExceededText(*closure), FailureKind::kDeadlineExceeded);
    ++plan.num_ended;
  }
  return plan;
}

}  // namespace dispatch::state
