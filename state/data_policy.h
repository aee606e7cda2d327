// DataPolicy: what the data service's planners (split_planner.h,
// worker_planner.h, job_planner.h, consumer_planner.h) are told besides the
// state and the request: the dispatcher's data-service flags, and how to read
// a dataset's split source (decoded by the reactor from the dataset's
// metadata). Also the checks and names those planners and the reactor share,
// so that each error text is written once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "state/planted_bug.h"
#include "state/records.h"

namespace dispatch::state {

// The data-service flags the decisions read (reactor/data_service_options.h
// says what each means; the reactor copies them in).
struct DataPolicy {
  // False: a restart forgot the state, and errors about unknown ids say so.
  bool fault_tolerant_mode = true;
  // A fixed worker list is configured (--worker-addresses): static sharding
  // is possible.
  bool has_worker_list = false;
  uint64_t max_splits_per_call = 65536;
  uint64_t max_name_bytes = 4096;
  uint64_t job_gc_timeout_ms = 5 * 60 * 1000;
  uint64_t client_timeout_ms = 2 * 60 * 1000;  // 0: consumers never time out
  // How long a removed worker's address keeps its tasks before they are
  // handed over (hand_over_planner.h); 0: at its removal.
  uint64_t worker_grace_ms = 10 * 1000;
  PlantedBug planted_bug = PlantedBug::kNone;  // TEST-ONLY (planted_bug.h)
};

// What the planners need of a dataset's split source.
struct SplitSourceSummary {
  bool present = false;  // false: the dataset has none (no DYNAMIC job of it)
  uint64_t num_splits = 0;
};
// Looks up a dataset's split source: NotFound for an unknown dataset,
// DataLoss for metadata that does not decode. Must answer the same for the
// same dataset every time (a dataset never changes once registered).
using SplitSourceLookup = std::function<Result<SplitSourceSummary>(uint64_t dataset_id)>;

// True for FILE, DATA, FILE_OR_DATA and HINT: a worker index and count per task.
bool IsStaticSharding(ProcessingMode mode);

// Whether a task of `job` whose worker is gone for good is handed over
// (HandOverTask): DYNAMIC and OFF jobs that are not round robin. Tasks of
// other jobs wait for a worker at their address.
bool HandsOverTasks(const Job& job);

// InvalidArgument "<what> of N bytes is longer than the limit of M" when
// `value` is longer than `max_bytes` (names and addresses from peers).
Status CheckNameLength(std::string_view what, std::string_view value, uint64_t max_bytes);

}  // namespace dispatch::state
