#include "state/schedule_call_planner.h"

#include <optional>
#include <utility>

#include "state/closure_requests.h"

namespace dispatch::state {
namespace {

void TakeIds(ScheduleCallPlan& plan, ScheduleRoute route, SchedulePlan&& schedule) {
  plan.route = route;
  plan.ids = std::move(schedule.ids);
  plan.updates = std::move(schedule.updates);
  plan.num_new = schedule.num_new;
}

// A request id of the call names one of the coordinator's closures: the call
// retries one whose reply was lost. Asked of the ids alone, so that a call
// that is no retry never reads its closures.
bool RetriesAClosure(const DispatcherState& state, const ScheduleCallRequest& request) {
  for (uint64_t request_id : request.request_ids) {
    if (request_id != 0 &&
        state.FindClosureByRequest(request.coordinator_id, request_id) != nullptr)
      return true;
  }
  return false;
}

}  // namespace

Result<ScheduleCallPlan> PlanScheduleCall(const DispatcherState& state,
                                          const RefusedSchedules& refused,
                                          const SortedIdSet& released,
                                          const ScheduleCallRequest& request, const Stamp& stamp,
                                          const ClosurePolicy& policy) {
  const uint64_t coordinator_id = request.coordinator_id;
  const bool no_closures = request.request_ids.empty();
  ScheduleCallPlan plan;
  // A late copy of a refused call first: the error that refused it may be
  // gone, and scheduling the copy would queue closures the client was told
  // were not queued (RefusedSchedules). No lookup per closure while no call
  // was refused, the common case.
  const RefusedSchedules::Refusal* earlier = nullptr;
  if (!no_closures && refused.requests() > 0 &&
      policy.planted_bug != PlantedBug::kForgetRefusals)  // TEST-ONLY planted bug
    earlier = refused.Find(coordinator_id, request.request_ids);
  if (earlier != nullptr) {
    Result<std::optional<SchedulePlan>> merged = PlanScheduleAfterRefusal(
        state, coordinator_id, request.closures(),
        [&](uint64_t request_id) { return refused.Contains(coordinator_id, request_id); }, stamp,
        released);
    if (!merged.ok()) return merged.status();
    if (merged->has_value()) {
      TakeIds(plan, ScheduleRoute::kRefusedAgain, std::move(**merged));
      return plan;
    }
    plan.route = ScheduleRoute::kRefusedAgain;
    plan.refused = true;
    plan.refusal = *earlier;
    return plan;
  }
  const CoordinatorError* error = state.FindCoordinatorError(coordinator_id);
  if (error != nullptr || no_closures) {
    if (!no_closures && RetriesAClosure(state, request)) {
      Result<std::optional<SchedulePlan>> retry =
          PlanScheduleRetryUnderError(state, coordinator_id, request.closures(), stamp);
      if (!retry.ok()) return retry.status();
      if (retry->has_value()) {
        TakeIds(plan, ScheduleRoute::kRetried, std::move(**retry));
        return plan;
      }
    }
    plan.route = ScheduleRoute::kRefused;
    plan.refused = true;
    if (error != nullptr) {
      plan.refusal = {error->closure_id, error->error};
      plan.record_refusal = !no_closures;
      AddErrorCleared(plan.updates, stamp, coordinator_id);
    }
    return plan;
  }
  if (!request.has_room) return plan;  // kNeedsRoom
  Result<SchedulePlan> scheduled =
      PlanSchedule(state, coordinator_id, request.closures(), stamp, released);
  if (!scheduled.ok()) return scheduled.status();
  TakeIds(plan, ScheduleRoute::kScheduled, std::move(*scheduled));
  return plan;
}

}  // namespace dispatch::state
