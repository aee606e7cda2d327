#include "state/split_planner.h"

#include <algorithm>
#include <string>

#include "state/record_budget.h"

namespace dispatch::state {
namespace {

// Whether an unfinished task of `job` other than `task_id` holds splits of
// `repetition` from `provider` (its last grant, not yet consumed).
bool AnotherTaskHoldsSplits(const DispatcherState& state, const Job& job, uint64_t task_id,
                            uint32_t provider, int64_t repetition) {
  for (const Task* task : state.TasksForJob(job.id)) {
    if (task->id == task_id || task->finished) continue;
    const SplitGrant* grant = state.FindSplitGrant(task->id, provider);
    if (grant != nullptr && grant->outstanding && grant->repetition == repetition) return true;
  }
  return false;
}

}  // namespace

Result<GetSplitPlan> PlanGetSplit(const DispatcherState& state, const GetSplitRequest& request,
                                  const SplitSourceLookup& sources, const Stamp& stamp,
                                  const DataPolicy& policy) {
  const uint64_t task_id = request.task_id;
  const uint32_t provider = request.provider_index;
  uint64_t sequence = request.sequence;
  const int64_t repetition = request.repetition;

  const Task* task = state.FindTask(task_id);
  if (task == nullptr) {
    if (!policy.fault_tolerant_mode && task_id != 0 && task_id < state.NextTaskId()) {
      return NotFoundError(
          "task " + std::to_string(task_id) +
          " is unknown; the dispatcher runs without fault-tolerant mode "
          "(--fault-tolerant-mode=false), so a dispatcher restart forgot it and its job: "
          "create the job again");
    }
    return NotFoundError("task " + std::to_string(task_id) +
                         " is unknown (removed, or never created)");
  }
  const Job* job = state.FindJob(task->job_id);
  const uint64_t job_id = job->id;
  if (!job->IsDynamic()) {
    return FailedPreconditionError(
        "job " + std::to_string(job_id) + " of task " + std::to_string(task_id) + " is " +
        ProcessingModeName(job->processing_mode) + ", not DYNAMIC, and has no splits");
  }
  if (provider >= job->providers.size()) {
    return NotFoundError("job " + std::to_string(job_id) + " has no split provider " +
                         std::to_string(provider));
  }
  if (sequence == 0) return InvalidArgumentError("split request sequence numbers start at 1");
  Result<SplitSourceSummary> source = sources(job->dataset_id);
  if (!source.ok()) return source.status();

  GetSplitPlan plan;
  plan.dataset_id = job->dataset_id;
  // A retry: the same answer as the first time (even after a restart).
  if (const SplitGrant* grant = state.FindSplitGrant(task_id, provider)) {
    if (sequence == grant->sequence) {
      if (policy.planted_bug != PlantedBug::kSplitRetryNotIdempotent) {
        plan.answer = {grant->repetition, grant->end_of_splits, grant->split_indices};
        return plan;
      }
      sequence = grant->sequence + 1;  // TEST-ONLY planted bug: a retry is a new request
    } else if (sequence < grant->sequence) {
      return FailedPreconditionError(
          "task " + std::to_string(task_id) + " split provider " + std::to_string(provider) +
          ": sequence " + std::to_string(sequence) + " is older than its last request, sequence " +
          std::to_string(grant->sequence));
    }
  }
  if (job->garbage_collected) {
    return FailedPreconditionError("job " + std::to_string(job_id) + " has been garbage-collected");
  }
  if (task->finished)
    return FailedPreconditionError("task " + std::to_string(task_id) + " is finished");
  const SplitProviderProgress& progress = job->providers[provider];
  plan.answer.repetition = repetition;
  if (job->finished || repetition < progress.repetition) {
    // That repetition is over for everyone.
    plan.answer.end_of_splits = true;
    return plan;
  }
  if (repetition > progress.repetition) {
    return FailedPreconditionError("job " + std::to_string(job_id) + " split provider " +
                                   std::to_string(provider) + " is at repetition " +
                                   std::to_string(progress.repetition) + ", not " +
                                   std::to_string(repetition));
  }

  // At most what one ProduceSplit record holds, whatever max_splits_per_call
  // says: the grant is one record, so a larger request gets fewer splits
  // (and asks again with its next sequence), never a refusal.
  const uint64_t wanted =
      std::min<uint64_t>(std::clamp<uint64_t>(request.max_splits, 1, policy.max_splits_per_call),
                         SplitIndicesPerRecord(stamp.max_record_bytes));
  std::vector<uint64_t>& indices = plan.answer.split_indices;
  indices.reserve(std::min<uint64_t>(wanted, 4096));
  for (uint64_t index : progress.requeued) {
    if (indices.size() >= wanted) break;
    indices.push_back(index);
  }
  for (uint64_t next = progress.next_index; indices.size() < wanted && next < source->num_splits;
       ++next) {
    indices.push_back(next);
  }
  // No split left to hand out. For a job that requeues, the repetition ends
  // only once no other task holds splits of it: those may still come back
  // (its worker removed, or the task handed over) and be handed out again.
  // Until then the answer is "none now, ask again": empty, not the end.
  plan.answer.end_of_splits =
      indices.empty() &&
      (!job->requeue_unfinished_splits || policy.planted_bug == PlantedBug::kEndSplitsWhileHeld ||
       !AnotherTaskHoldsSplits(state, *job, task_id, provider, repetition));

  // One segment of the record's size: the reactor journals its bytes as they are.
  const uint64_t words = 2 + capnp::sizeInWords<journal::Update>() +
                         capnp::sizeInWords<journal::ProduceSplit>() + indices.size();
  auto produce = plan.updates.Add(stamp.time_micros, words).initProduceSplit();
  produce.setJobId(job_id);
  produce.setRepetition(repetition);
  produce.setProviderIndex(provider);
  produce.setTaskId(task_id);
  produce.setSequence(sequence);
  auto list = produce.initSplitIndices(static_cast<unsigned>(indices.size()));
  for (size_t i = 0; i < indices.size(); ++i) list.set(static_cast<unsigned>(i), indices[i]);
  produce.setEndOfSplits(plan.answer.end_of_splits);
  return plan;
}

}  // namespace dispatch::state
