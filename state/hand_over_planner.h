// HandOverPlanner: which tasks are finished on behalf of a worker that is
// gone for good. A removed worker's address keeps its tasks for the grace
// period (DataPolicy::worker_grace_ms, measured from the removal on the
// serving clock: WorkerAbsence); a worker registering there in time keeps
// them. Past it, every unfinished task of a DYNAMIC or OFF job that is not
// round robin is handed over (HandOverTask: requeued splits or an ended
// stream, then finished); tasks of static sharding and round robin wait for
// their address. Pure: the reactor's liveness timer (gc_timers.cc) and the
// simulation's timers carry the plan out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "state/closure_updates.h"
#include "state/data_policy.h"
#include "state/dispatcher_state.h"
#include "state/soft_state.h"

namespace dispatch::state {

struct TaskHandOverPlan {
  // One HandOverTask per task, by address then task id; `task_ids[i]` and
  // `addresses[i]` name update i's task and the address it leaves.
  UpdateList updates;
  std::vector<uint64_t> task_ids;
  std::vector<std::string> addresses;
  // Absences that are over: a worker is registered at the address again, or
  // it has no unfinished task left (those handed over by an earlier plan).
  SoftChanges soft;
};

// `now_ms` is the serving clock's reading (the absences' clock).
TaskHandOverPlan PlanTaskHandOvers(const DispatcherState& state, const SoftState& soft,
                                   uint64_t now_ms, const DataPolicy& policy, const Stamp& stamp);

}  // namespace dispatch::state
