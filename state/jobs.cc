// Jobs and job clients: creation (anonymous or named), acquiring and releasing
// clients, garbage collection. A named key belongs to at most one job that is
// not garbage-collected; a job's client count equals its live clients.

#include <cstdint>
#include <string>

#include "state/bytes.h"
#include "state/dispatcher_state.h"
#include "state/index_util.h"

namespace dispatch::state {

namespace {

std::string JobName(uint64_t id) { return "job " + std::to_string(id); }
std::string ClientName(uint64_t id) { return "job client " + std::to_string(id); }

std::string KeyName(const NamedJobKey& key) {
  return "job name '" + key.name + "' index " + std::to_string(key.index);
}

bool KnownMode(ProcessingMode mode) { return mode <= ProcessingMode::HINT; }
bool KnownTarget(TargetWorkers target) { return target <= TargetWorkers::LOCAL; }

}  // namespace

Status DispatcherState::CheckCreateJob(journal::CreateJob::Reader u) const {
  const uint64_t id = u.getJobId();
  if (id == 0) return InvalidArgumentError("job id 0 is reserved");
  if (id == UINT64_MAX) {
    return InvalidArgumentError("job id " + std::to_string(id) +
                                " is the largest: the next job id would wrap to 0");
  }
  if (jobs_.contains(id)) return AlreadyExistsError(JobName(id) + " already exists");
  if (id < next_job_id_) {
    return InvalidArgumentError(JobName(id) + " reuses an id below the next job id " +
                                std::to_string(next_job_id_));
  }
  if (!datasets_.contains(u.getDatasetId())) {
    return NotFoundError(JobName(id) + " names unknown dataset " +
                         std::to_string(u.getDatasetId()));
  }
  const ProcessingMode mode = u.getProcessingMode();
  if (!KnownMode(mode)) {
    return InvalidArgumentError(JobName(id) + " has unknown processing mode " +
                                std::to_string(static_cast<unsigned>(mode)));
  }
  if (!KnownTarget(u.getTargetWorkers())) {
    return InvalidArgumentError(JobName(id) + " has unknown target workers " +
                                std::to_string(static_cast<unsigned>(u.getTargetWorkers())));
  }
  const uint32_t providers = u.getNumSplitProviders();
  if (mode == ProcessingMode::DYNAMIC) {
    if (providers == 0)
      return InvalidArgumentError(JobName(id) + " is DYNAMIC but has no split provider");
    if (providers > kMaxSplitProviders) {
      return InvalidArgumentError(JobName(id) + " has " + std::to_string(providers) +
                                  " split providers, more than " +
                                  std::to_string(kMaxSplitProviders));
    }
  } else {
    if (providers != 0) {
      return InvalidArgumentError(JobName(id) + " is " + ProcessingModeName(mode) +
                                  " and cannot have " + std::to_string(providers) +
                                  " split providers");
    }
    if (u.getRequeueUnfinishedSplits()) {
      return InvalidArgumentError(JobName(id) + " is " + ProcessingModeName(mode) +
                                  " and has no splits to requeue");
    }
  }
  if (u.getNamedKey().isNamed()) {
    NamedJobKey key{ToString(u.getNamedKey().getNamed().getName()),
                    u.getNamedKey().getNamed().getIndex()};
    if (key.name.empty()) return InvalidArgumentError(JobName(id) + " has an empty job name");
    const Job* holder = FindNamedJob(key);
    if (holder != nullptr && !holder->garbage_collected) {
      return AlreadyExistsError(KeyName(key) + " is held by " + JobName(holder->id));
    }
  }
  return Status::Ok();
}

void DispatcherState::ApplyCreateJob(journal::CreateJob::Reader u, int64_t now) {
  Job job;
  job.id = u.getJobId();
  job.dataset_id = u.getDatasetId();
  job.processing_mode = u.getProcessingMode();
  if (u.getNamedKey().isNamed()) {
    job.named_key = NamedJobKey{ToString(u.getNamedKey().getNamed().getName()),
                                u.getNamedKey().getNamed().getIndex()};
    indexes_.job_by_name.insert_or_assign(*job.named_key, job.id);
  }
  job.num_consumers = u.getNumConsumers();
  job.target_workers = u.getTargetWorkers();
  job.requeue_unfinished_splits = u.getRequeueUnfinishedSplits();
  job.providers.resize(u.getNumSplitProviders());
  job.created_micros = now;
  indexes_.unfinished_jobs.insert(job.id);
  next_job_id_ = job.id + 1;
  jobs_.emplace(job.id, std::move(job));
}

Status DispatcherState::CheckAcquireJobClient(journal::AcquireJobClient::Reader u) const {
  const uint64_t id = u.getJobClientId();
  if (id == 0) return InvalidArgumentError("job client id 0 is reserved");
  if (id == UINT64_MAX) {
    return InvalidArgumentError("job client id " + std::to_string(id) +
                                " is the largest: the next job client id would wrap to 0");
  }
  if (job_clients_.contains(id)) return AlreadyExistsError(ClientName(id) + " already exists");
  if (id < next_job_client_id_) {
    return InvalidArgumentError(ClientName(id) + " reuses an id below the next job client id " +
                                std::to_string(next_job_client_id_));
  }
  const Job* job = FindJob(u.getJobId());
  if (job == nullptr)
    return NotFoundError(ClientName(id) + " names unknown job " + std::to_string(u.getJobId()));
  if (job->garbage_collected) {
    return FailedPreconditionError(JobName(job->id) + " has been garbage-collected");
  }
  return Status::Ok();
}

void DispatcherState::ApplyAcquireJobClient(journal::AcquireJobClient::Reader u, int64_t now) {
  JobClient client{u.getJobClientId(), u.getJobId(), now};
  jobs_.at(client.job_id).num_clients += 1;
  AddToIndex(indexes_.clients_by_job, client.job_id, client.id);
  next_job_client_id_ = client.id + 1;
  job_clients_.emplace(client.id, client);
}

Status DispatcherState::CheckReleaseJobClient(journal::ReleaseJobClient::Reader u) const {
  if (!job_clients_.contains(u.getJobClientId())) {
    return NotFoundError(ClientName(u.getJobClientId()) + " is unknown");
  }
  return Status::Ok();
}

void DispatcherState::ApplyReleaseJobClient(journal::ReleaseJobClient::Reader u, int64_t now) {
  const JobClient& client = job_clients_.at(u.getJobClientId());
  Job& job = jobs_.at(client.job_id);
  job.num_clients -= 1;
  job.last_client_released_micros = now;
  RemoveFromIndex(indexes_.clients_by_job, client.job_id, client.id);
  job_clients_.erase(u.getJobClientId());
}

Status DispatcherState::CheckGarbageCollectJob(journal::GarbageCollectJob::Reader u) const {
  const Job* job = FindJob(u.getJobId());
  if (job == nullptr) return NotFoundError(JobName(u.getJobId()) + " is unknown");
  if (job->finished) return FailedPreconditionError(JobName(job->id) + " is already finished");
  if (job->num_clients > 0) {
    return FailedPreconditionError(JobName(job->id) + " still has " +
                                   std::to_string(job->num_clients) + " clients");
  }
  if (job->last_client_released_micros < 0) {
    return FailedPreconditionError(JobName(job->id) + " has never had a client released");
  }
  return Status::Ok();
}

void DispatcherState::ApplyGarbageCollectJob(journal::GarbageCollectJob::Reader u) {
  Job& job = jobs_.at(u.getJobId());
  job.garbage_collected = true;
  job.finished = true;
  indexes_.unfinished_jobs.erase(job.id);
  auto active = indexes_.tasks_by_job.find(job.id);
  if (active != indexes_.tasks_by_job.end()) {
    for (uint64_t task_id : active->second) {
      Task& task = tasks_.at(task_id);
      if (!task.finished) FinishTaskRecord(task);
    }
  }
  for (const PendingTask& pending : job.pending_tasks) {
    const Task& task = tasks_.at(pending.task_id);
    RemoveFromIndex(indexes_.tasks_by_worker, task.worker_address, task.id);
    indexes_.task_by_job_worker.erase(std::make_pair(task.job_id, task.worker_address));
    split_grants_.erase(split_grants_.lower_bound(SplitRequester{task.id, 0}),
                        split_grants_.upper_bound(SplitRequester{task.id, UINT32_MAX}));
    tasks_.erase(pending.task_id);
    if (effects_ != nullptr) effects_->tasks_removed.push_back(pending.task_id);
  }
  job.pending_tasks.clear();
}

const Job* DispatcherState::FindJob(uint64_t job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

Result<const Job*> DispatcherState::GetJob(uint64_t job_id) const {
  const Job* job = FindJob(job_id);
  if (job == nullptr) return NotFoundError(JobName(job_id) + " is unknown");
  return job;
}

const Job* DispatcherState::FindNamedJob(const NamedJobKey& key) const {
  auto it = indexes_.job_by_name.find(key);
  return it == indexes_.job_by_name.end() ? nullptr : FindJob(it->second);
}

std::vector<const Job*> DispatcherState::ListJobs() const {
  std::vector<const Job*> out;
  out.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) out.push_back(&job);
  return out;
}

std::vector<const Job*> DispatcherState::ListUnfinishedJobs() const {
  std::vector<const Job*> out;
  out.reserve(indexes_.unfinished_jobs.size());
  for (uint64_t id : indexes_.unfinished_jobs) out.push_back(&jobs_.at(id));
  return out;
}

const JobClient* DispatcherState::FindJobClient(uint64_t job_client_id) const {
  auto it = job_clients_.find(job_client_id);
  return it == job_clients_.end() ? nullptr : &it->second;
}

Result<const JobClient*> DispatcherState::GetJobClient(uint64_t job_client_id) const {
  const JobClient* client = FindJobClient(job_client_id);
  if (client == nullptr) return NotFoundError(ClientName(job_client_id) + " is unknown");
  return client;
}

std::vector<const JobClient*> DispatcherState::ClientsForJob(uint64_t job_id) const {
  std::vector<const JobClient*> out;
  auto it = indexes_.clients_by_job.find(job_id);
  if (it == indexes_.clients_by_job.end()) return out;
  for (uint64_t id : it->second) out.push_back(&job_clients_.at(id));
  return out;
}

std::vector<const JobClient*> DispatcherState::ListJobClients() const {
  std::vector<const JobClient*> out;
  out.reserve(job_clients_.size());
  for (const auto& [id, client] : job_clients_) out.push_back(&client);
  return out;
}

}  // namespace dispatch::state
