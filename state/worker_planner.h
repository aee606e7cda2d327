// WorkerPlanner: the data service's decisions about workers, as pure
// functions of (state, soft state, request, time):
//  - a heartbeat: the first one of an address registers the worker (with the
//    dataset kinds it announces); one from a new process at a registered
//    address (another incarnation) replaces the old registration; a worker
//    that attaches anew (registered, reconnected, or first heard since a
//    restart) gets a task of every unfinished job whose dataset it can
//    produce that it lacks (state/task_routing.h): active, or for a
//    round-robin job pending, to start at the round after the furthest any of
//    its consumers reported; every heartbeat is answered with the tasks to
//    start (assigned, not among those it runs) and to delete (those it runs
//    that are not assigned to it);
//  - workerUpdate: the tasks it reports completed are finished.
// The reactor (worker_service.cc) and the simulation carry the plans out.
#pragma once

#include <capnp/list.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "state/closure_planner.h"
#include "state/closure_updates.h"
#include "state/dispatcher_state.h"
#include "state/soft_state.h"

namespace dispatch::state {

struct WorkerHeartbeatRequest {
  std::string address;  // non-empty (the reactor checks names and limits)
  std::string transfer_address;
  capnp::List<capnp::Text>::Reader tags;
  capnp::List<capnp::Text>::Reader dataset_kinds;  // any order, repeats allowed
  uint64_t incarnation = 0;                        // the worker process; 0: not said
  std::vector<uint64_t> current_tasks;             // the tasks it runs: any order, repeats allowed
  uint64_t connection = 0;  // the reactor's id of the link it came over (nonzero)
};

struct WorkerHeartbeatPlan {
  // Nonzero: another process's registration holds the address. The caller
  // removes that worker (its closures leave it first, RemoveWorker is
  // journaled), then plans again; of this plan only `updates[0]`, the new
  // registration, is meant, to be sized before the old one is removed.
  uint64_t replaces_worker_id = 0;
  uint64_t worker_id = 0;  // the registration that heartbeats (new when `registers`)
  bool registers = false;
  bool attaches = false;  // attached anew (see WorkerLiveness::WouldAttach)
  // RegisterWorker when `registers`, then CreateTask / CreatePendingTask of
  // the tasks it lacks when it registers or attaches.
  UpdateList updates;
  // The answer: assigned tasks (by id, new ones included) it does not run,
  // and tasks it runs that are not assigned to it (by id).
  std::vector<uint64_t> tasks_to_start;
  std::vector<uint64_t> tasks_to_delete;
  SoftChanges soft;  // the worker heard
};

// `now_ms` is the serving clock's reading (liveness is measured on it).
WorkerHeartbeatPlan PlanWorkerHeartbeat(const DispatcherState& state, const SoftState& soft,
                                        const WorkerHeartbeatRequest& request, uint64_t now_ms,
                                        const Stamp& stamp);

struct TaskProgress {
  uint64_t task_id = 0;
  bool completed = false;
};
// FinishTask for each task reported completed that is not finished yet, once
// (a repeated report changes nothing; a pending round-robin task has not
// started for its consumers, so it cannot have finished for them). NotFound
// naming the first unknown task, and nothing changes.
Result<UpdateList> PlanWorkerUpdate(const DispatcherState& state,
                                    const std::vector<TaskProgress>& progress, const Stamp& stamp);

struct WorkerRemovalPlan {
  UpdateList updates;
  SoftChanges soft;  // its address absent from `now_ms`, when it keeps unfinished tasks
};
// A worker removed (its connection dropped, its heartbeats stopped, another
// process took its address): its closures leave it first (PlanWorkerLost:
// put back, or failed past their attempts), then RemoveWorker. Its tasks
// stay with its address for the grace period (hand_over_planner.h), measured
// from `now_ms` (the serving clock). Empty when `worker_id` is not registered.
WorkerRemovalPlan PlanWorkerRemoval(const DispatcherState& state, const ClosurePolicy& policy,
                                    uint64_t worker_id, std::string_view reason, uint64_t now_ms,
                                    const Stamp& stamp);

}  // namespace dispatch::state
