// ScheduleCallPlanner: the decision of one Coordinator.schedule call, in the
// order that keeps late copies and retries safe: a call with a request id a
// first error refused before gets that refusal again (or, merged with
// closures scheduled before, their ids: PlanScheduleAfterRefusal); a pending
// first error refuses the call, which clears it and remembers the refusal,
// unless the call retries closures whose reply was lost
// (PlanScheduleRetryUnderError); otherwise the closures are scheduled
// (PlanSchedule), once the call holds room in the queue for them. Pure: the
// reactor (ClosureDispatcher::ScheduleCall) and the simulation carry it out.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "state/closure_planner.h"
#include "state/closure_updates.h"
#include "state/dispatcher_state.h"
#include "state/index_util.h"
#include "state/refused_schedules.h"

namespace dispatch::state {

struct ScheduleCallRequest {
  uint64_t coordinator_id = 0;
  std::vector<uint64_t> request_ids;  // per closure of the call, in order; 0: none
  // The call's closures, as PlanSchedule takes them. Called at most once, and
  // only when the plan needs them: a refused call, or one waiting for room,
  // never reads its closures' bytes (reading them counts against the
  // message's traversal limit, so a call near the size limit is read once).
  std::function<std::vector<NewClosure>()> closures;
  // The call holds room in the closure queue for its closures. Without it a
  // call to be scheduled is answered kNeedsRoom, nothing planned.
  bool has_room = true;
};

enum class ScheduleRoute {
  kNeedsRoom,     // ask again once the call holds room
  kScheduled,     // scheduled: `ids`
  kRetried,       // retried under a pending first error: `ids`, the error left pending
  kRefusedAgain,  // a request id refused before: `refusal`, or a merged retry's `ids`
  kRefused,       // the pending first error (if any) answers: `refusal`, and is cleared
};

struct ScheduleCallPlan {
  ScheduleRoute route = ScheduleRoute::kNeedsRoom;
  // The answer: the closures' ids, or (`refused`) the refusal; a refusal
  // with closure_id 0 is a call of no closures with no error pending.
  bool refused = false;
  std::vector<uint64_t> ids;
  RefusedSchedules::Refusal refusal;
  UpdateList updates;
  uint64_t num_new = 0;  // closures scheduled anew: the pending releases may share their commit
  // Soft change: once `updates` are carried, RefusedSchedules::Record the
  // call's request ids with `refusal`, so that a late copy gets it too.
  bool record_refusal = false;
};

// `refused` and `released` are the soft state (the refusals remembered, the
// releases not journaled yet); `policy` is read for its planted bug only.
// Errors: PlanSchedule's.
Result<ScheduleCallPlan> PlanScheduleCall(const DispatcherState& state,
                                          const RefusedSchedules& refused,
                                          const SortedIdSet& released,
                                          const ScheduleCallRequest& request, const Stamp& stamp,
                                          const ClosurePolicy& policy);

}  // namespace dispatch::state
