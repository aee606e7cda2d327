#include "state/closure_requests.h"

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <utility>

#include "common/closure_limits.h"
#include "state/record_budget.h"

namespace dispatch::state {

Result<SchedulePlan> PlanSchedule(const DispatcherState& state, uint64_t coordinator_id,
                                  std::vector<NewClosure> closures, const Stamp& stamp,
                                  const SortedIdSet& released) {
  SchedulePlan plan;
  plan.ids.assign(closures.size(), 0);
  const uint64_t overhead = ClosureBatchOverheadWords();
  // The new closures are gathered at the front of `closures` (no second
  // vector: a call of 1,024 closures would copy 150 KiB more).
  {
    std::vector<uint64_t> request_ids;
    for (const NewClosure& closure : closures)
      if (closure.request_id != 0) request_ids.push_back(closure.request_id);
    if (std::optional<uint64_t> twice = RepeatedId(std::move(request_ids)))
      return InvalidArgumentError("the batch repeats request id " + std::to_string(*twice));
  }
  size_t fresh = 0;
  uint64_t next_id = state.NextClosureId();
  for (size_t i = 0; i < closures.size(); ++i) {
    NewClosure& closure = closures[i];
    auto index = [i] { return "closure " + std::to_string(i) + " of the batch"; };
    const std::string_view function(closure.function.cStr(), closure.function.size());
    if (function.empty()) return InvalidArgumentError(index() + " has no function");
    if (closure.request_id != 0) {
      const Closure* earlier = state.FindClosureByRequest(coordinator_id, closure.request_id);
      if (earlier != nullptr) {
        plan.ids[i] = earlier->id;
        continue;
      }
    }
    for (uint64_t resource : closure.resources) {
      if (state.FindResource(resource) == nullptr)
        return NotFoundError("per-worker resource " + std::to_string(resource) + " is unknown");
    }
    for (uint64_t& input : closure.inputs) {
      if (input >= kInputInCall) {
        const uint64_t j = input - kInputInCall;
        if (j >= i) {
          return InvalidArgumentError(index() + " names closure " + std::to_string(j) +
                                      " of the batch as its input: only an earlier one may be");
        }
        input = plan.ids[j];
        continue;
      }
      const Closure* found = state.FindClosure(input);
      if (found == nullptr || found->coordinator_id != coordinator_id || released.contains(input)) {
        return NotFoundError("input closure " + std::to_string(input) + " of " + index() +
                             " is unknown (never scheduled by coordinator " +
                             std::to_string(coordinator_id) +
                             ", or released); nothing of the batch was scheduled");
      }
    }
    const uint64_t bytes =
        (overhead + ScheduledItemWords(function, closure.args.size(),
                                       closure.resources.size() + closure.inputs.size())) *
        8;
    if (bytes > stamp.max_record_bytes) {
      return ResourceExhaustedError(
          index() + " (function " + std::string(function.substr(0, 64)) + ", " +
          std::to_string(closure.args.size()) + " bytes of args) takes " + std::to_string(bytes) +
          " bytes in the journal, over the limit of " + std::to_string(stamp.max_record_bytes) +
          " bytes per record; nothing of the batch was scheduled");
    }
    // The deadline counts from now, the dispatcher's clock at schedule.
    closure.deadline_micros =
        closure.timeout_ms == 0
            ? 0
            : stamp.time_micros + static_cast<int64_t>(closure.timeout_ms) * 1000;
    closure.closure_id = next_id++;
    plan.ids[i] = closure.closure_id;
    // Slot `fresh` (< i) holds one moved already or a retried one no longer needed.
    if (fresh != i) closures[fresh] = std::move(closure);
    ++fresh;
  }
  closures.resize(fresh);
  plan.num_new = fresh;
  AddScheduled(plan.updates, stamp, coordinator_id, closures);
  return plan;
}

namespace {

// A call that retries (some of) an earlier one: when none of its request ids
// names a closure of the coordinator, nullopt. Otherwise PlanSchedule's plan,
// with the closures it schedules anew whose request id `cancel` picks
// cancelled in the same updates.
Result<std::optional<SchedulePlan>> PlanRetry(const DispatcherState& state,
                                              uint64_t coordinator_id,
                                              std::vector<NewClosure> closures,
                                              const std::function<bool(uint64_t)>& cancel,
                                              const Stamp& stamp,
                                              const SortedIdSet& released) {
  const bool retry = std::any_of(closures.begin(), closures.end(), [&](const NewClosure& c) {
    return c.request_id != 0 && state.FindClosureByRequest(coordinator_id, c.request_id) != nullptr;
  });
  if (!retry) return std::optional<SchedulePlan>();
  std::vector<uint64_t> request_ids;
  std::vector<std::vector<uint64_t>> inputs;  // as asked (in-call indexes)
  request_ids.reserve(closures.size());
  inputs.reserve(closures.size());
  for (const NewClosure& c : closures) {
    request_ids.push_back(c.request_id);
    inputs.push_back(c.inputs);
  }
  const uint64_t first_new = state.NextClosureId();
  Result<SchedulePlan> plan =
      PlanSchedule(state, coordinator_id, std::move(closures), stamp, released);
  if (!plan.ok()) return plan.status();
  // A new closure with a failed or cancelled input fails as it is scheduled
  // (and so does one whose in-call input does): it is done, not cancelled
  // (found by the simulation: the cancel of it was refused).
  std::set<uint64_t> failing;
  std::vector<uint64_t> cancelled;
  for (size_t i = 0; i < plan->ids.size(); ++i) {
    if (plan->ids[i] < first_new) continue;
    bool fails = false;
    for (uint64_t input : inputs[i]) {
      const uint64_t id = input >= kInputInCall ? plan->ids[input - kInputInCall] : input;
      const Closure* closure = state.FindClosure(id);
      fails = fails || failing.contains(id) ||
              (closure != nullptr && (closure->state == ClosureState::FAILED ||
                                      closure->state == ClosureState::CANCELLED));
    }
    if (fails) {
      failing.insert(plan->ids[i]);
    } else if (cancel(request_ids[i])) {
      cancelled.push_back(plan->ids[i]);
    }
  }
  AddCancelled(plan->updates, stamp, cancelled);
  return std::optional<SchedulePlan>(std::move(*plan));
}

}  // namespace

Result<std::optional<SchedulePlan>> PlanScheduleRetryUnderError(const DispatcherState& state,
                                                                uint64_t coordinator_id,
                                                                std::vector<NewClosure> closures,
                                                                const Stamp& stamp) {
  return PlanRetry(
      state, coordinator_id, std::move(closures), [](uint64_t) { return true; }, stamp, {});
}

Result<std::optional<SchedulePlan>> PlanScheduleAfterRefusal(
    const DispatcherState& state, uint64_t coordinator_id, std::vector<NewClosure> closures,
    const std::function<bool(uint64_t)>& refused, const Stamp& stamp,
    const SortedIdSet& released) {
  const bool under_error = state.FindCoordinatorError(coordinator_id) != nullptr;
  return PlanRetry(
      state, coordinator_id, std::move(closures),
      [&](uint64_t request_id) { return under_error || refused(request_id); }, stamp, released);
}

Result<ResourcePlan> PlanResource(const DispatcherState& state, uint64_t coordinator_id,
                                  std::string_view function, std::string_view args,
                                  uint64_t request_id, const Stamp& stamp) {
  if (function.empty()) return InvalidArgumentError("a per-worker resource needs a function");
  ResourcePlan plan;
  if (request_id != 0) {
    const PerWorkerResource* earlier = state.FindResourceByRequest(coordinator_id, request_id);
    if (earlier != nullptr) {
      // A retry after a lost reply: the same resource, unless the key was
      // reused for something else.
      if (earlier->function_name != function || earlier->args != args) {
        return InvalidArgumentError(
            "request id " + std::to_string(request_id) + " already created per-worker resource " +
            std::to_string(earlier->id) + " with function " + earlier->function_name);
      }
      plan.resource_id = earlier->id;
      return plan;
    }
  }
  plan.resource_id = state.NextResourceId();
  AddResourceCreated(plan.updates, stamp, plan.resource_id, coordinator_id, function, args,
                     request_id);
  return plan;
}

Result<std::vector<uint64_t>> PlanRelease(const DispatcherState& state, uint64_t coordinator_id,
                                          const std::vector<uint64_t>& closure_ids,
                                          const SortedIdSet& pending) {
  std::vector<uint64_t> release;
  // An id asked twice is released once; `seen` is kept only when one is.
  const bool repeats = RepeatedId(closure_ids).has_value();
  IdSet seen;
  for (uint64_t id : closure_ids) {
    const Closure* closure = state.FindClosure(id);
    if (closure == nullptr || (repeats && !seen.insert(id).second) || pending.contains(id))
      continue;  // released already
    auto name = [id] { return "closure " + std::to_string(id); };  // for errors only
    if (closure->coordinator_id != coordinator_id)
      return NotFoundError(name() + " is not a closure of coordinator " +
                           std::to_string(coordinator_id));
    if (!IsClosureDone(closure->state))
      return FailedPreconditionError(name() + " is " + ClosureStateName(closure->state) +
                                     ": only a finished, failed or cancelled closure is released");
    release.push_back(id);
  }
  return release;
}

ReleaseFlushPlan PlanReleaseFlush(const DispatcherState& state, const SortedIdSet& pending,
                                  const Stamp& stamp) {
  ReleaseFlushPlan plan;
  plan.release.reserve(pending.size());
  for (uint64_t id : pending) {
    const Closure* closure = state.FindClosure(id);
    if (closure == nullptr || !IsClosureDone(closure->state)) continue;
    if (state.IsNeededAsInput(id)) {
      plan.held.push_back(id);
      continue;
    }
    plan.release.push_back(id);
    if (closure->result_stored && closure->result_size > 0) plan.stored.push_back(id);
  }
  if (!plan.release.empty()) AddReleased(plan.updates, stamp, plan.release);
  return plan;
}

std::optional<TakenFirstError> PlanTakeFirstError(const DispatcherState& state,
                                                  uint64_t coordinator_id, const Stamp& stamp) {
  const CoordinatorError* pending = state.FindCoordinatorError(coordinator_id);
  if (pending == nullptr) return std::nullopt;
  TakenFirstError taken;
  taken.closure_id = pending->closure_id;
  taken.message = pending->error;
  AddErrorCleared(taken.updates, stamp, coordinator_id);
  return taken;
}

}  // namespace dispatch::state
