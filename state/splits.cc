// Dynamic sharding: per DYNAMIC job, per split provider, per repetition, the
// splits are handed out in order and exactly once (requeued splits of a dead
// worker first, then fresh indices). Each requester (task, provider) keeps its
// last answer so a retried getSplit with the same sequence gets it again.

#include <string>

#include "state/dispatcher_state.h"

namespace dispatch::state {

namespace {

std::string JobName(uint64_t id) { return "job " + std::to_string(id); }

std::string ProviderName(uint64_t job_id, uint32_t provider) {
  return JobName(job_id) + " split provider " + std::to_string(provider);
}

}  // namespace

Status DispatcherState::CheckProduceSplit(journal::ProduceSplit::Reader u) const {
  const Job* job = FindJob(u.getJobId());
  if (job == nullptr) return NotFoundError(JobName(u.getJobId()) + " is unknown");
  if (!job->IsDynamic()) {
    return FailedPreconditionError(JobName(job->id) + " is " +
                                   ProcessingModeName(job->processing_mode) +
                                   ", not DYNAMIC, and has no splits");
  }
  if (job->finished) return FailedPreconditionError(JobName(job->id) + " is finished");
  const uint32_t p = u.getProviderIndex();
  if (p >= job->providers.size()) {
    return NotFoundError(JobName(job->id) + " has no split provider " + std::to_string(p));
  }
  const SplitProviderProgress& progress = job->providers[p];
  if (u.getRepetition() != progress.repetition) {
    return FailedPreconditionError(ProviderName(job->id, p) + " is at repetition " +
                                   std::to_string(progress.repetition) + ", not " +
                                   std::to_string(u.getRepetition()));
  }
  const Task* task = FindTask(u.getTaskId());
  if (task == nullptr)
    return NotFoundError("task " + std::to_string(u.getTaskId()) + " is unknown");
  if (task->job_id != job->id) {
    return FailedPreconditionError("task " + std::to_string(task->id) + " belongs to " +
                                   JobName(task->job_id) + ", not " + JobName(job->id));
  }
  if (task->finished)
    return FailedPreconditionError("task " + std::to_string(task->id) + " is finished");
  const SplitGrant* last = FindSplitGrant(task->id, p);
  const uint64_t last_sequence = last == nullptr ? 0 : last->sequence;
  if (u.getSequence() <= last_sequence) {
    return FailedPreconditionError("task " + std::to_string(task->id) + " already used sequence " +
                                   std::to_string(last_sequence) + " with " +
                                   ProviderName(job->id, p) + "; sequence " +
                                   std::to_string(u.getSequence()) + " is not newer");
  }
  const auto indices = u.getSplitIndices();
  const size_t requeued = progress.requeued.size();
  for (size_t i = 0; i < indices.size(); ++i) {
    const uint64_t expected =
        i < requeued ? progress.requeued[i] : progress.next_index + (i - requeued);
    if (indices[i] != expected) {
      return FailedPreconditionError(ProviderName(job->id, p) + " repetition " +
                                     std::to_string(progress.repetition) + ": split " +
                                     std::to_string(indices[i]) + " is out of order, expected " +
                                     std::to_string(expected));
    }
  }
  if (u.getEndOfSplits() && indices.size() < requeued) {
    return FailedPreconditionError(
        ProviderName(job->id, p) + " cannot end repetition " + std::to_string(progress.repetition) +
        " with " + std::to_string(requeued - indices.size()) + " requeued splits left");
  }
  return Status::Ok();
}

void DispatcherState::ApplyProduceSplit(journal::ProduceSplit::Reader u) {
  Job& job = jobs_.at(u.getJobId());
  SplitProviderProgress& progress = job.providers.at(u.getProviderIndex());
  const auto indices = u.getSplitIndices();
  SplitGrant grant;
  grant.sequence = u.getSequence();
  grant.repetition = progress.repetition;
  grant.end_of_splits = u.getEndOfSplits();
  grant.split_indices.reserve(indices.size());
  for (uint64_t index : indices) {
    grant.split_indices.push_back(index);
    if (!progress.requeued.empty()) {
      progress.requeued.pop_front();
    } else {
      progress.next_index += 1;
    }
  }
  grant.outstanding = !grant.split_indices.empty();
  if (grant.end_of_splits) {
    progress.repetition += 1;
    progress.next_index = 0;
  }
  split_grants_.insert_or_assign(SplitRequester{u.getTaskId(), u.getProviderIndex()},
                                 std::move(grant));
}

void DispatcherState::RequeueOutstandingSplits(const Task& task, bool any_repetition) {
  Job& job = jobs_.at(task.job_id);
  if (!job.requeue_unfinished_splits) return;  // at-most-once: lost with the worker
  auto end = split_grants_.upper_bound(SplitRequester{task.id, UINT32_MAX});
  for (auto it = split_grants_.lower_bound(SplitRequester{task.id, 0}); it != end; ++it) {
    SplitGrant& grant = it->second;
    if (!grant.outstanding) continue;
    grant.outstanding = false;
    SplitProviderProgress& progress = job.providers.at(it->first.provider_index);
    // RemoveWorker: splits of an ended repetition are not handed out again
    // (what journals written before HandOverTask mean). HandOverTask: they
    // are, in the provider's current repetition.
    if (job.finished || (!any_repetition && grant.repetition != progress.repetition)) continue;
    for (uint64_t index : grant.split_indices) progress.requeued.push_back(index);
  }
}

void DispatcherState::ConsumeOutstandingSplits(uint64_t task_id) {
  auto end = split_grants_.upper_bound(SplitRequester{task_id, UINT32_MAX});
  for (auto it = split_grants_.lower_bound(SplitRequester{task_id, 0}); it != end; ++it) {
    it->second.outstanding = false;
  }
}

const SplitProviderProgress* DispatcherState::FindSplitProvider(uint64_t job_id,
                                                                uint32_t provider_index) const {
  const Job* job = FindJob(job_id);
  if (job == nullptr || provider_index >= job->providers.size()) return nullptr;
  return &job->providers[provider_index];
}

const SplitGrant* DispatcherState::FindSplitGrant(uint64_t task_id, uint32_t provider_index) const {
  auto it = split_grants_.find(SplitRequester{task_id, provider_index});
  return it == split_grants_.end() ? nullptr : &it->second;
}

std::vector<std::pair<SplitRequester, const SplitGrant*>> DispatcherState::SplitGrantsForJob(
    uint64_t job_id) const {
  std::vector<std::pair<SplitRequester, const SplitGrant*>> out;
  for (const auto& [requester, grant] : split_grants_) {
    if (tasks_.at(requester.task_id).job_id == job_id) out.emplace_back(requester, &grant);
  }
  return out;
}

}  // namespace dispatch::state
