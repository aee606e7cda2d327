// ConsumerPlanner: the data service's decisions about consumers (job
// clients), as pure functions of (state, soft state, request, time):
//  - a client heartbeat records the client's round and drives the round-robin
//    agreement on its job's front pending task: a consumer blocked at or
//    before the task's target round accepts it there (once every consumer
//    accepted, the task starts at that round); one already past it (or at it
//    without blocking) rejects it, and the target moves exponentially further
//    out past the furthest round the consumer reported;
//  - a release ends a client (a retry of one already gone succeeds);
//  - a round-robin task is removed once every consumer asked at one round;
//  - clients not heard from within client_timeout_ms are released.
// The answer to a heartbeat is read from the state its updates leave
// (AnswerClientHeartbeat): it is what Apply made of them, not a second copy
// of Apply. The reactor (job_service.cc, gc_timers.cc) and the simulation
// carry the plans out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "state/closure_updates.h"
#include "state/data_policy.h"
#include "state/dispatcher_state.h"
#include "state/soft_state.h"

namespace dispatch::state {

struct ClientHeartbeatRequest {
  uint64_t job_client_id = 0;
  int64_t current_round = -1;  // the round it reads; -1: none (not round robin)
  int64_t blocked_round = -1;  // the round it waits at for a pending task; -1: none
};
struct ClientHeartbeatPlan {
  uint64_t job_id = 0;
  UpdateList updates;  // a ClientHeartbeat accepting or rejecting the front pending task, or none
  SoftChanges soft;    // the client heard, with its round
};
// NotFound for a client that is unknown (saying it was released, or that a
// restart without fault-tolerant mode may have forgotten it), FailedPrecondition
// for a client whose job was garbage-collected. `now_ms`: the serving clock.
Result<ClientHeartbeatPlan> PlanClientHeartbeat(const DispatcherState& state, const SoftState& soft,
                                                const ClientHeartbeatRequest& request,
                                                uint64_t now_ms, const Stamp& stamp,
                                                const DataPolicy& policy);

struct ClientHeartbeatAnswer {
  int64_t block_round = -1;  // the front pending task's target round; -1: none pending
  // The job's active tasks, finished ones included, by id. Valid until the
  // state next changes.
  std::vector<const Task*> tasks;
  bool job_finished = false;
};
// REQUIRES: job `job_id` exists (a plan's).
ClientHeartbeatAnswer AnswerClientHeartbeat(const DispatcherState& state, uint64_t job_id);

struct ReleasePlan {
  UpdateList updates;  // ReleaseJobClient, or none for a client already gone
  SoftChanges soft;
};
// NotFound for a client id never issued.
Result<ReleasePlan> PlanReleaseJobClient(const DispatcherState& state, uint64_t job_client_id,
                                         const Stamp& stamp);

struct RemoveTaskRequest {
  uint64_t task_id = 0;
  uint32_t consumer_index = 0;
  int64_t round = 0;
};
struct RemoveTaskPlan {
  bool removed = false;        // the answer: gone, or removed by this request
  UpdateList updates;          // RemoveTask when this request completed the agreement
  std::string worker_address;  // of the removed task: told to delete it once committed
  SoftChanges soft;            // the vote, or the end of the agreement
};
// A task already gone counts as removed. FailedPrecondition for a task of a
// job that is not round robin, or one still pending; InvalidArgument for a
// consumer index out of the job's range.
Result<RemoveTaskPlan> PlanMaybeRemoveTask(const DispatcherState& state, const SoftState& soft,
                                           const RemoveTaskRequest& request, const Stamp& stamp);

struct ClientTimeoutPlan {
  std::vector<uint64_t> released;  // job clients, by id
  UpdateList updates;              // updates[i]: ReleaseJobClient of released[i]
  SoftChanges soft;                // those released, and timed-out ids the state no longer has
};
// Clients not heard from within policy.client_timeout_ms of `now_ms` (the
// serving clock); none when that is 0.
ClientTimeoutPlan PlanClientTimeouts(const DispatcherState& state, const SoftState& soft,
                                     uint64_t now_ms, const Stamp& stamp, const DataPolicy& policy);

}  // namespace dispatch::state
