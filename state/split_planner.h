// SplitPlanner: getSplit's decision, dynamic sharding. Per DYNAMIC job, split
// provider and repetition, splits are handed out in order (a dead worker's
// requeued splits first, for jobs that asked), each exactly once: a request
// names its (task, provider) sequence number, the answer is journaled as one
// ProduceSplit (a batch of up to max_splits splits, cut to what one journal
// record holds) and a retry with the same sequence is answered from the
// state, across restarts. When a provider runs dry its requester gets end of
// splits and the provider moves to the next repetition, except for a job
// that requeues while another task still holds splits of the repetition:
// then the answer is empty without the end ("none now, ask again": those
// splits may be requeued; the worker asks again shortly with its next
// sequence, and that empty grant is journaled like any other). A request
// for an older repetition gets end of splits. Pure: the reactor (split_service.cc)
// and the simulation carry the plan out.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "state/closure_updates.h"
#include "state/data_policy.h"
#include "state/dispatcher_state.h"

namespace dispatch::state {

struct SplitAnswer {
  int64_t repetition = 0;
  bool end_of_splits = false;
  std::vector<uint64_t> split_indices;  // into the job's dataset's split source
};

struct GetSplitRequest {
  uint64_t task_id = 0;
  uint32_t provider_index = 0;
  uint64_t sequence = 0;
  int64_t repetition = 0;
  uint64_t max_splits = 1;  // as asked: clamped to 1..max_splits_per_call and the record
};

struct GetSplitPlan {
  uint64_t dataset_id = 0;  // whose split source the indices name (payloads)
  SplitAnswer answer;
  // One ProduceSplit when the answer is new; empty for a retry (answered as
  // the first time) or a repetition that is over.
  UpdateList updates;
};

// Errors: NotFound for an unknown task (saying so when a restart without
// fault-tolerant mode forgot it) or split provider; FailedPrecondition for a
// job that is not DYNAMIC, a sequence older than the last, a
// garbage-collected job, a finished task, a repetition the provider has not
// reached; InvalidArgument for sequence 0; the lookup's error for the
// dataset's split source.
Result<GetSplitPlan> PlanGetSplit(const DispatcherState& state, const GetSplitRequest& request,
                                  const SplitSourceLookup& sources, const Stamp& stamp,
                                  const DataPolicy& policy);

}  // namespace dispatch::state
