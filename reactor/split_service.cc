// DispatcherService::getSplit: dynamic sharding. Per DYNAMIC job, split
// provider and repetition, splits are handed out in order (a dead worker's
// requeued splits first, for jobs that asked), each exactly once: a request
// names its (task, provider) sequence number, the answer is journaled as one
// ProduceSplit (a batch of up to maxSplits splits) and a retry with the same
// sequence is answered from the state, across restarts. When a provider runs
// dry its requester gets end of splits and the provider moves to the next
// repetition; a request for an older repetition gets end of splits.

#include <algorithm>
#include <string>
#include <vector>

#include "reactor/data_service.h"
#include "reactor/service_util.h"
#include "reactor/services.h"
#include "state/record_budget.h"

namespace dispatch::reactor {

using state::ProcessingModeName;
using state::TargetWorkersName;
namespace {

void FillSplits(const SplitSourceInfo& source, const std::vector<uint64_t>& indices,
                capnp::List<rpc::Split>::Builder splits) {
  for (size_t i = 0; i < indices.size(); ++i) {
    splits[i].setIndex(indices[i]);
    if (source.kind == SplitSourceInfo::Kind::kExplicit && indices[i] < source.payloads.size()) {
      const std::string& payload = source.payloads[indices[i]];
      splits[i].setPayload(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(payload.data()),
                                               payload.size()));
    }
  }
}

}  // namespace

kj::Promise<void> DispatcherService::getSplit(GetSplitContext context) {
  DataService& data = this->data();
  const auto& state = data.state();
  auto request = context.getParams().getRequest();
  const uint64_t task_id = request.getTaskId();
  const uint32_t provider = request.getProviderIndex();
  const uint64_t sequence = request.getSequence();
  const int64_t repetition = request.getRepetition();

  const state::Task* task = state.FindTask(task_id);
  if (task == nullptr) {
    if (!data.options().fault_tolerant_mode && task_id != 0 && task_id < state.NextTaskId()) {
      ThrowStatus(NotFoundError(
          "task " + std::to_string(task_id) +
          " is unknown; the dispatcher runs without fault-tolerant mode "
          "(--fault-tolerant-mode=false), so a dispatcher restart forgot it and its job: "
          "create the job again"));
    }
    ThrowStatus(NotFoundError("task " + std::to_string(task_id) +
                              " is unknown (removed, or never created)"));
  }
  const state::Job* job = state.FindJob(task->job_id);
  const uint64_t job_id = job->id;
  if (!job->IsDynamic()) {
    ThrowStatus(FailedPreconditionError(
        "job " + std::to_string(job_id) + " of task " + std::to_string(task_id) + " is " +
        ProcessingModeName(job->processing_mode) + ", not DYNAMIC, and has no splits"));
  }
  if (provider >= job->providers.size()) {
    ThrowStatus(NotFoundError("job " + std::to_string(job_id) + " has no split provider " +
                              std::to_string(provider)));
  }
  if (sequence == 0) ThrowStatus(InvalidArgumentError("split request sequence numbers start at 1"));
  const SplitSourceInfo& source = *ValueOrThrow(data.datasets().SplitSource(job->dataset_id));

  auto response = context.getResults().initResponse();
  response.setIncarnation(data.incarnation());

  // A retry: the same answer as the first time (even after a restart).
  if (const state::SplitGrant* grant = state.FindSplitGrant(task_id, provider)) {
    if (sequence == grant->sequence) {
      response.setRepetition(grant->repetition);
      response.setEndOfSplits(grant->end_of_splits);
      FillSplits(source, grant->split_indices,
                 response.initSplits(static_cast<unsigned>(grant->split_indices.size())));
      return data.durable().Barrier();
    }
    if (sequence < grant->sequence) {
      ThrowStatus(FailedPreconditionError(
          "task " + std::to_string(task_id) + " split provider " + std::to_string(provider) +
          ": sequence " + std::to_string(sequence) + " is older than its last request, sequence " +
          std::to_string(grant->sequence)));
    }
  }
  if (job->garbage_collected) {
    ThrowStatus(
        FailedPreconditionError("job " + std::to_string(job_id) + " has been garbage-collected"));
  }
  if (task->finished)
    ThrowStatus(FailedPreconditionError("task " + std::to_string(task_id) + " is finished"));
  const state::SplitProviderProgress& progress = job->providers[provider];
  response.setRepetition(repetition);
  if (job->finished || repetition < progress.repetition) {
    // That repetition is over for everyone.
    response.setEndOfSplits(true);
    return data.durable().Barrier();
  }
  if (repetition > progress.repetition) {
    ThrowStatus(FailedPreconditionError("job " + std::to_string(job_id) + " split provider " +
                                        std::to_string(provider) + " is at repetition " +
                                        std::to_string(progress.repetition) + ", not " +
                                        std::to_string(repetition)));
  }

  // At most what one ProduceSplit record holds, whatever --max-splits-per-call
  // says: the grant is one record, so a larger request gets fewer splits
  // (and asks again with its next sequence), never a refusal.
  const uint64_t wanted = std::min<uint64_t>(
      std::clamp<uint64_t>(request.getMaxSplits(), 1, data.options().max_splits_per_call),
      state::SplitIndicesPerRecord(data.durable().max_record_bytes()));
  std::vector<uint64_t> indices;
  indices.reserve(std::min<uint64_t>(wanted, 4096));
  for (uint64_t index : progress.requeued) {
    if (indices.size() >= wanted) break;
    indices.push_back(index);
  }
  for (uint64_t next = progress.next_index; indices.size() < wanted && next < source.num_splits;
       ++next) {
    indices.push_back(next);
  }
  const bool end_of_splits = indices.empty();
  ThrowIfError(data.Submit([&](journal::Update::Builder update) {
    auto produce = update.initProduceSplit();
    produce.setJobId(job_id);
    produce.setRepetition(repetition);
    produce.setProviderIndex(provider);
    produce.setTaskId(task_id);
    produce.setSequence(sequence);
    auto list = produce.initSplitIndices(static_cast<unsigned>(indices.size()));
    for (size_t i = 0; i < indices.size(); ++i) list.set(i, indices[i]);
    produce.setEndOfSplits(end_of_splits);
  }));
  response.setEndOfSplits(end_of_splits);
  data.mutable_stats().splits_handed_out += indices.size();
  FillSplits(source, indices, response.initSplits(static_cast<unsigned>(indices.size())));
  return data.durable().Barrier();
}

}  // namespace dispatch::reactor
