// Settings of the data service (datasets, jobs, tasks, splits, workers,
// consumers): every one is a `dispatcher` flag. Defaults follow the tf.data
// service dispatcher where it has one; the rest are ours and say so in --help.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "reactor/closure_options.h"

namespace dispatch::reactor {

struct DataServiceOptions {
  // True: the state survives a restart (the journal is always written; this
  // product's promise is durability). False: a restart begins from an empty
  // state (ids are never reused), so clients get the reference's clear errors.
  bool fault_tolerant_mode = true;
  // Fixed worker list for static sharding (FILE, DATA, FILE_OR_DATA, HINT): a
  // worker's index is its place here. Empty: static sharding is refused.
  std::vector<std::string> worker_addresses;
  // Job GC: how often to look, and how long a job must have had no client.
  // A check interval of 0 turns job GC off.
  uint64_t job_gc_check_interval_ms = 10 * 60 * 1000;
  uint64_t job_gc_timeout_ms = 5 * 60 * 1000;
  // A consumer with no heartbeat for this long is released (0: never).
  uint64_t client_timeout_ms = 2 * 60 * 1000;
  // A worker with no heartbeat for this long is removed (0: never; a dropped
  // connection removes it at once regardless).
  uint64_t worker_timeout_ms = 60 * 1000;
  // How long a removed worker's address keeps its tasks: a worker registering
  // there in time keeps them; past it the DYNAMIC and OFF ones are handed
  // over (state/hand_over_planner.h). No longer than worker_timeout_ms when
  // that is set (WorkerGraceMs); 0: handed over at the removal.
  uint64_t worker_grace_ms = 10 * 1000;
  // What the dispatcher asks workers to heartbeat at (HeartbeatIntervalMs).
  // 0: derived from worker_timeout_ms.
  uint64_t worker_heartbeat_interval_ms = 0;
  // Most splits one batched getSplit may hand out.
  uint64_t max_splits_per_call = 65536;
  // Longest worker address, job name, tag or transfer address accepted.
  uint64_t max_name_bytes = 4096;
  // Closure coordination (the other half of the dispatcher).
  ClosureOptions closures;
};

// The interval workers are told to heartbeat at: worker_heartbeat_interval_ms,
// or when that is 0 a quarter of the worker timeout, at most 10 s (10 s
// without a timeout), so that an obedient worker beats four times before it
// would be removed as silent.
uint64_t HeartbeatIntervalMs(const DataServiceOptions& options);

// The grace period in force: worker_grace_ms, cut to worker_timeout_ms
// when that is nonzero and smaller.
uint64_t WorkerGraceMs(const DataServiceOptions& options);

// InvalidArgument, naming both flags, when a set heartbeat interval is over
// half the worker timeout: a worker obeying it would be removed between two
// beats that came on time.
Status CheckHeartbeatInterval(const DataServiceOptions& options);

}  // namespace dispatch::reactor
