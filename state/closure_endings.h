// Closure endings the caller asks for ahead of time: a cancel (Coordinator
// .cancel) and a deadline (ClosureSpec.timeoutMs). Pure planners, as in
// closure_planner.h: they read the state and return the Updates, plus which
// workers to tell (the reactor pushes WorkerControl.cancelClosures, best
// effort). Neither ending is its coordinator's first error, and neither
// cancels the coordinator's other closures: the caller chose it for this
// closure, and the closure's own outcome reports it.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "common/status.h"
#include "state/closure_updates.h"
#include "state/dispatcher_state.h"
#include "state/index_util.h"

namespace dispatch::state {

struct EndingPlan {
  UpdateList updates;
  // Closures that were running when they ended, by the worker running them:
  // it is told to drop them.
  std::map<uint64_t, std::vector<uint64_t>> running;
  uint64_t num_ended = 0;  // closures the updates end (queued and running)
};

struct CancelPlan {
  EndingPlan ending;
  // Per asked id, in order: its state after the updates (CANCELLED, or
  // FINISHED / FAILED for one done before: left as it is).
  std::vector<ClosureState> states;
};
// Cancels each of `closure_ids` that is queued or assigned (idempotent: one
// cancelled before stays so, an id listed twice counts once). NotFound naming
// the first id that is not an unreleased closure of `coordinator_id` (or is
// in `releasing`: released, its update still on its way); nothing is planned
// then.
Result<CancelPlan> PlanCancel(const DispatcherState& state, uint64_t coordinator_id,
                              const std::vector<uint64_t>& closure_ids,
                              const SortedIdSet& releasing, const Stamp& stamp);

// Every closure of `coordinator_id` that is not done (waiting, queued or
// assigned) cancelled, as PlanCancel cancels each (the operator's
// Dispatcher.cancelCoordinator). InvalidArgument for coordinator 0, NotFound
// for one with no unreleased closure; an empty plan when all are done.
Result<EndingPlan> PlanCancelCoordinator(const DispatcherState& state, uint64_t coordinator_id,
                                         const Stamp& stamp);

// Fails every queued or assigned closure whose deadline is at or before
// `stamp.time_micros` with a "deadline exceeded" error naming its timeout
// (ClosureFailed.deadlineExceeded).
EndingPlan PlanDeadlines(const DispatcherState& state, const Stamp& stamp);

// The error a closure that passed its deadline fails with.
std::string DeadlineExceededText(const Closure& closure);

}  // namespace dispatch::state
