// JobPlanner: the life of data-service jobs, as pure functions of the state:
//  - getOrCreateJob: an anonymous request always creates a job; a named one
//    creates one unless a live job (not garbage-collected) holds the name and
//    index, which it then joins if it asks for the same job (mode, target
//    workers, dataset, round-robin consumers). A new job gets a task on every
//    registered worker that can produce its dataset (state/task_routing.h),
//    and every caller gets a job client of its own, heard from now;
//  - job GC: a job that has had no client for job_gc_timeout_ms is
//    garbage-collected (its tasks finished or dropped, its workers told to
//    delete them).
// The reactor (job_service.cc, gc_timers.cc) and the simulation carry the
// plans out.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "state/closure_updates.h"
#include "state/data_policy.h"
#include "state/dispatcher_state.h"
#include "state/soft_state.h"

namespace dispatch::state {

struct JobRequest {
  uint64_t dataset_id = 0;
  std::string job_name;  // empty: anonymous
  int64_t job_name_index = 0;
  ProcessingMode processing_mode = ProcessingMode::OFF;
  TargetWorkers target_workers = TargetWorkers::AUTO;
  uint32_t num_consumers = 0;  // 0: not round robin
  bool requeue_unfinished_splits = false;
};

// Task ids by worker address.
using TasksByAddress = std::map<std::string, std::vector<uint64_t>>;

struct JobPlan {
  uint64_t job_id = 0;
  uint64_t job_client_id = 0;
  bool created = false;  // a new job (else a named one joined)
  // CreateJob when created, AcquireJobClient, then CreateTask for each
  // worker that gets a task.
  UpdateList updates;
  // The new job's tasks, to announce (startTasks) once they commit.
  TasksByAddress tasks_to_push;
  SoftChanges soft;  // the new client heard (no round yet)
};

// Errors: the dataset's NotFound; InvalidArgument for a job name past
// max_name_bytes, an unknown processing mode or target, requeuing splits
// without DYNAMIC; FailedPrecondition for a named job held with other
// settings (naming both), static sharding without a worker list, DYNAMIC
// over a dataset without a split source (or the lookup's error). `now_ms`:
// the serving clock, for the new client's heartbeat.
Result<JobPlan> PlanGetOrCreateJob(const DispatcherState& state, const JobRequest& request,
                                   const SplitSourceLookup& sources, uint64_t now_ms,
                                   const Stamp& stamp, const DataPolicy& policy);

// The job's tasks, active and pending, by worker address (to withdraw them).
TasksByAddress TasksByWorker(const DispatcherState& state, uint64_t job_id);

struct CollectedJob {
  uint64_t job_id = 0;
  TasksByAddress tasks;  // to tell their workers to delete (deleteTasks)
};
struct JobGcPlan {
  std::vector<CollectedJob> jobs;  // by id
  UpdateList updates;              // updates[i]: GarbageCollectJob of jobs[i]
  SoftChanges soft;                // the removal agreements of their tasks end
};
// Jobs not finished, with no client, whose last client was released at least
// job_gc_timeout_ms before the stamp's time.
JobGcPlan PlanJobGc(const DispatcherState& state, const Stamp& stamp, const DataPolicy& policy);

}  // namespace dispatch::state
