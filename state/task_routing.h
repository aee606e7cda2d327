// Task routing: which workers get a task of which job, as pure functions of
// the state. A worker gets a task of a job only when it can produce the job's
// dataset: the dataset has no kind, the worker announced no kinds (it is
// routed every job, as every worker was before workers announced kinds), or
// the kinds it registered with include the dataset's. A job that no
// registered worker can produce waits, task-less there, for one that can: it
// is counted (JobsWithoutWorker), never failed. The reactor turns these
// answers into CreateTask / CreatePendingTask updates, which Check refuses on
// a worker that cannot produce the job's dataset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "state/dispatcher_state.h"

namespace dispatch::state {

// The kind of a dataset with definition bytes `definition`: the first word of
// its first line (after leading spaces, tabs and CRs; up to the next space,
// tab, CR or newline), as in "range count=10". Empty (no kind: every worker
// serves it) when there is no such word, or it is longer than `max_bytes`, or
// holds a control byte (below 0x20, or 0x7f): binary definitions are not
// routed by kind.
std::string DatasetKindOfDefinition(std::string_view definition, size_t max_bytes);

// Whether `worker` can produce `dataset` (see above).
bool CanProduce(const Worker& worker, const Dataset& dataset);

// Whether the worker registered at `address` can produce job `job_id`'s
// dataset; false when either is unknown.
bool CanServeJob(const DispatcherState& state, uint64_t job_id, std::string_view address);

// Addresses of the registered workers (by worker id) that should get a task
// of the new job `job_id`: those that can produce its dataset and hold none of
// its tasks. Empty for an unknown or finished job.
std::vector<std::string> WorkersNeedingTask(const DispatcherState& state, uint64_t job_id);
// The same for a job of `dataset` that is not created yet (a plan's): every
// registered worker that can produce it, by worker id.
std::vector<std::string> WorkersForNewJob(const DispatcherState& state, const Dataset& dataset);

// The unfinished jobs (by id) the worker registered at `address` should get a
// task of: it can produce their dataset and holds none of their tasks. Empty
// when no worker is registered there.
std::vector<uint64_t> JobsNeedingTask(const DispatcherState& state, std::string_view address);
// The same for `worker`, which need not be registered yet (a plan's
// registration: the kinds it will produce are its record's).
std::vector<uint64_t> JobsNeedingTask(const DispatcherState& state, const Worker& worker);

// Unfinished jobs no registered worker can produce (no worker at all counts
// as none that can). O(jobs + announced kinds): for stats, not per heartbeat.
uint64_t JobsWithoutWorker(const DispatcherState& state);

}  // namespace dispatch::state
