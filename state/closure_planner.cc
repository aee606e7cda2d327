#include "state/closure_planner.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace dispatch::state {
namespace {

std::string Name(uint64_t closure_id) { return "closure " + std::to_string(closure_id); }

// First error: the coordinator's queued closures are cancelled (those
// running finish normally). Valid after `out`'s updates so far, which never
// queue a closure of the coordinator.
void AddCancelQueued(UpdateList& out, const DispatcherState& state, uint64_t coordinator_id,
                     const Stamp& stamp) {
  std::vector<uint64_t> queued;
  for (const Closure* closure : state.UnfinishedClosures(coordinator_id)) {
    if (closure->state == ClosureState::QUEUED) queued.push_back(closure->id);
  }
  AddCancelled(out, stamp, queued);
}

// A worker with free slots, for one assignment pass.
struct FreeWorker {
  uint64_t worker_id = 0;
  uint64_t free = 0;
  const FunctionSet* functions = nullptr;
};

// A queued closure some free worker can run.
struct Candidate {
  QueueKey place;
  uint64_t closure_id = 0;
  size_t kind = 0;  // index into the pass's capable-worker masks
};

}  // namespace

uint64_t StartDelayMs(const ClosurePolicy& policy, uint64_t index) {
  if (policy.start_delay_max_ms == 0) return policy.start_delay_ms;
  if (index != 0 && policy.start_delay_ms > policy.start_delay_max_ms / index)
    return policy.start_delay_max_ms;
  return std::min(policy.start_delay_ms * index, policy.start_delay_max_ms);
}

std::vector<std::string_view> NeededFunctions(const DispatcherState& state,
                                              const ClosureKind& kind) {
  std::vector<std::string_view> needed{kind.function};
  for (uint64_t id : kind.resources) {
    // Resources are never forgotten, and a closure names only existing ones.
    const PerWorkerResource* resource = state.FindResource(id);
    if (resource != nullptr) needed.push_back(resource->function_name);
  }
  return needed;
}

bool CanRun(const FunctionSet& functions, const std::vector<std::string_view>& needed) {
  return std::all_of(needed.begin(), needed.end(),
                     [&](std::string_view f) { return functions.find(f) != functions.end(); });
}

AssignmentPlan PlanAssignments(const DispatcherState& state, const std::vector<LiveWorker>& workers,
                               uint64_t now_ms, uint64_t turn, const Stamp& stamp) {
  AssignmentPlan plan;
  if (state.NumClosuresInState(ClosureState::QUEUED) == 0) return plan;
  std::vector<FreeWorker> free;
  for (const LiveWorker& worker : workers) {
    if (worker.paused || worker.slots == 0 || now_ms < worker.eligible_at_ms) continue;
    const size_t running = state.NumClosuresOnWorker(worker.worker_id);
    if (running >= worker.slots) continue;
    free.push_back({worker.worker_id, worker.slots - running, worker.functions.get()});
  }
  if (free.empty()) return plan;
  // Round robin from a first worker that moves from pass to pass.
  std::rotate(free.begin(), free.begin() + static_cast<long>(turn % free.size()), free.end());

  // Per kind of closure, the workers that can run it and, from the front of
  // its queue, as many closures as those workers have free slots.
  std::vector<std::vector<bool>> capable;
  std::vector<Candidate> candidates;
  for (const auto& [kind, queue] : state.QueuedByKind()) {
    const std::vector<std::string_view> needed = NeededFunctions(state, kind);
    std::vector<bool> mask(free.size(), false);
    uint64_t slots = 0;
    for (size_t i = 0; i < free.size(); ++i) {
      if (!CanRun(*free[i].functions, needed)) continue;
      mask[i] = true;
      slots += free[i].free;
    }
    if (slots == 0) continue;  // they wait
    for (auto it = queue.begin(); it != queue.end() && slots > 0; ++it, --slots)
      candidates.push_back({it->first, it->second, capable.size()});
    capable.push_back(std::move(mask));
  }
  // Highest priority first, FIFO within a priority; each to the next capable
  // worker with a free slot, so a short queue spreads over the workers.
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.place < b.place; });
  size_t cursor = 0;
  for (const Candidate& candidate : candidates) {
    const std::vector<bool>& mask = capable[candidate.kind];
    for (size_t j = 0; j < free.size(); ++j) {
      const size_t i = (cursor + j) % free.size();
      if (!mask[i] || free[i].free == 0) continue;
      --free[i].free;
      cursor = i + 1;
      const Closure* closure = state.FindClosure(candidate.closure_id);
      plan.runs.push_back({closure->id, free[i].worker_id, closure->attempts + 1});
      break;
    }
  }
  AddAssigned(plan.updates, stamp, plan.runs);
  return plan;
}

uint64_t CountUnrunnable(const DispatcherState& state, const std::vector<LiveWorker>& workers) {
  uint64_t unrunnable = 0;
  for (const auto& [kind, queue] : state.QueuedByKind()) {
    const std::vector<std::string_view> needed = NeededFunctions(state, kind);
    const bool runnable = std::any_of(workers.begin(), workers.end(), [&](const LiveWorker& w) {
      return w.slots > 0 && CanRun(*w.functions, needed);
    });
    if (!runnable) unrunnable += queue.size();
  }
  return unrunnable;
}

UpdateList PlanRunEnded(const DispatcherState& state, const ClosurePolicy& policy,
                        const ClosureRun& run, RunEnd end, std::string_view reason,
                        const Stamp& stamp) {
  UpdateList out;
  const Closure& closure = *state.FindClosure(run.closure_id);
  if (state.FindCoordinatorError(closure.coordinator_id) != nullptr) {
    // Its coordinator's queue was cancelled by that error: so is it.
    AddCancelled(out, stamp, {closure.id});
    return out;
  }
  const bool transient = end == RunEnd::kTransientError;
  if (transient && closure.transient_failures >= policy.transient_retries) {
    AddFailed(out, stamp, run,
              Name(closure.id) + " failed with a transient error " +
                  std::to_string(closure.transient_failures + 1) + " times (limit " +
                  std::to_string(policy.transient_retries) + " retries): " + std::string(reason),
              FailureKind::kTransientErrors);
    AddCancelQueued(out, state, closure.coordinator_id, stamp);
    return out;
  }
  const uint64_t max_attempts = policy.max_closure_attempts;
  if (max_attempts != 0 && closure.attempts >= max_attempts) {
    std::string error = Name(closure.id) + " ran " + std::to_string(closure.attempts) +
                        " times (max_closure_attempts " + std::to_string(max_attempts) +
                        ") and was not retried: " + std::string(reason);
    if (transient) {
      // The function's own errors used up its runs.
      AddFailed(out, stamp, run, error, FailureKind::kTransientErrors);
      AddCancelQueued(out, state, closure.coordinator_id, stamp);
    } else {
      AddFailed(out, stamp, run, error + " (its workers failed, not the function)",
                FailureKind::kInfrastructure);
    }
    return out;
  }
  AddPutBack(out, stamp, run, transient);
  return out;
}

UpdateList PlanUserError(const DispatcherState& state, const ClosureRun& run,
                         std::string_view error, const Stamp& stamp) {
  UpdateList out;
  AddFailed(out, stamp, run, error, FailureKind::kUserError);
  AddCancelQueued(out, state, state.FindClosure(run.closure_id)->coordinator_id, stamp);
  return out;
}

UpdateList PlanWorkerLost(const DispatcherState& state, const ClosurePolicy& policy,
                          uint64_t worker_id, std::string_view reason, const Stamp& stamp) {
  // Each closure's plan touches only that closure (a put back, a cancel of
  // it, or a failure that cancels nothing), so all are planned against the
  // state before any of them.
  UpdateList out;
  const std::string why = "its worker was lost (" + std::string(reason) + ")";
  for (const Closure* closure : state.ClosuresOnWorker(worker_id)) {
    out.Append(PlanRunEnded(state, policy, {closure->id, worker_id, closure->attempts},
                            RunEnd::kWorkerLost, why, stamp));
  }
  return out;
}

UpdateList PlanRecovery(const DispatcherState& state, const Stamp& stamp) {
  UpdateList out;
  for (const Closure* closure : state.ClosuresInState(ClosureState::ASSIGNED))
    AddPutBack(out, stamp, {closure->id, closure->worker_id, closure->attempts}, false);
  return out;
}

}  // namespace dispatch::state
