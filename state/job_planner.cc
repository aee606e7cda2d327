#include "state/job_planner.h"

#include <string>

#include "state/task_routing.h"

namespace dispatch::state {
namespace {

std::string KeyName(std::string_view name, int64_t index) {
  return "job name '" + std::string(name) + "' index " + std::to_string(index);
}

// Reusing a named job must ask for the job it is.
Status CheckMatchingJob(const Job& job, const JobRequest& request) {
  const std::string key = KeyName(job.named_key->name, job.named_key->index);
  const std::string held = key + " is held by job " + std::to_string(job.id);
  if (job.processing_mode != request.processing_mode) {
    return FailedPreconditionError(
        held + " with processing mode " + ProcessingModeName(job.processing_mode) +
        "; this request asks for processing mode " + ProcessingModeName(request.processing_mode));
  }
  if (job.target_workers != request.target_workers) {
    return FailedPreconditionError(
        held + " with target workers " + TargetWorkersName(job.target_workers) +
        "; this request asks for target workers " + TargetWorkersName(request.target_workers));
  }
  if (job.dataset_id != request.dataset_id) {
    return FailedPreconditionError(held + " of dataset " + std::to_string(job.dataset_id) +
                                   "; this request names dataset " +
                                   std::to_string(request.dataset_id));
  }
  if (job.num_consumers != request.num_consumers) {
    return FailedPreconditionError(held + " with " + std::to_string(job.num_consumers) +
                                   " round-robin consumers; this request asks for " +
                                   std::to_string(request.num_consumers));
  }
  return Status::Ok();
}

Status CheckNewJob(const JobRequest& request, const SplitSourceLookup& sources,
                   const DataPolicy& policy) {
  const ProcessingMode mode = request.processing_mode;
  if (mode > ProcessingMode::HINT) {
    return InvalidArgumentError("processing mode " + std::to_string(static_cast<unsigned>(mode)) +
                                " is unknown");
  }
  if (request.target_workers > TargetWorkers::LOCAL) {
    return InvalidArgumentError("target workers " +
                                std::to_string(static_cast<unsigned>(request.target_workers)) +
                                " is unknown");
  }
  if (IsStaticSharding(mode) && !policy.has_worker_list) {
    return FailedPreconditionError(
        std::string("processing mode ") + ProcessingModeName(mode) +
        " shards by worker index and needs a fixed worker list, but none is "
        "configured: start the dispatcher with --worker-addresses");
  }
  if (request.requeue_unfinished_splits && mode != ProcessingMode::DYNAMIC) {
    return InvalidArgumentError(
        std::string("requeueUnfinishedSplits needs processing mode DYNAMIC, not ") +
        ProcessingModeName(mode));
  }
  if (mode == ProcessingMode::DYNAMIC) {
    Result<SplitSourceSummary> source = sources(request.dataset_id);
    if (!source.ok()) return source.status();
    if (!source->present) {
      return FailedPreconditionError(
          "dataset " + std::to_string(request.dataset_id) +
          " has no split source; a DYNAMIC job hands out splits and needs one");
    }
  }
  return Status::Ok();
}

// A job client of its own for the caller, heard from now.
void AddClient(JobPlan& plan, const DispatcherState& state, uint64_t now_ms, const Stamp& stamp) {
  plan.job_client_id = state.NextJobClientId();
  auto acquire = plan.updates.Add(stamp.time_micros).initAcquireJobClient();
  acquire.setJobClientId(plan.job_client_id);
  acquire.setJobId(plan.job_id);
  plan.soft.clients_heard.push_back({plan.job_client_id, -1, now_ms, stamp.time_micros});
}

}  // namespace

Result<JobPlan> PlanGetOrCreateJob(const DispatcherState& state, const JobRequest& request,
                                   const SplitSourceLookup& sources, uint64_t now_ms,
                                   const Stamp& stamp, const DataPolicy& policy) {
  Result<const Dataset*> dataset = state.GetDataset(request.dataset_id);
  if (!dataset.ok()) return dataset.status();
  DISPATCH_RETURN_IF_ERROR(CheckNameLength("job name", request.job_name, policy.max_name_bytes));
  const bool named = !request.job_name.empty();

  JobPlan plan;
  if (named) {
    const Job* job = state.FindNamedJob(NamedJobKey{request.job_name, request.job_name_index});
    if (job != nullptr && !job->garbage_collected) {
      DISPATCH_RETURN_IF_ERROR(CheckMatchingJob(*job, request));
      plan.job_id = job->id;
      AddClient(plan, state, now_ms, stamp);
      return plan;
    }
  }
  DISPATCH_RETURN_IF_ERROR(CheckNewJob(request, sources, policy));
  plan.created = true;
  plan.job_id = state.NextJobId();
  auto create = plan.updates.Add(stamp.time_micros).initCreateJob();
  create.setJobId(plan.job_id);
  create.setDatasetId(request.dataset_id);
  create.setProcessingMode(request.processing_mode);
  if (named) {
    auto key = create.getNamedKey().initNamed();
    key.setName(request.job_name);
    key.setIndex(request.job_name_index);
  } else {
    create.getNamedKey().setAnonymous();
  }
  create.setNumConsumers(request.num_consumers);
  create.setTargetWorkers(request.target_workers);
  create.setNumSplitProviders(request.processing_mode == ProcessingMode::DYNAMIC ? 1 : 0);
  create.setRequeueUnfinishedSplits(request.requeue_unfinished_splits);
  AddClient(plan, state, now_ms, stamp);
  // Only workers that can produce the job's dataset (see state/task_routing.h).
  uint64_t task_id = state.NextTaskId();
  for (const std::string& address : WorkersForNewJob(state, **dataset)) {
    auto task = plan.updates.Add(stamp.time_micros).initCreateTask();
    task.setTaskId(task_id);
    task.setJobId(plan.job_id);
    task.setWorkerAddress(address);
    plan.tasks_to_push[address].push_back(task_id++);
  }
  return plan;
}

TasksByAddress TasksByWorker(const DispatcherState& state, uint64_t job_id) {
  TasksByAddress by_worker;
  for (const Task* task : state.TasksForJob(job_id))
    by_worker[task->worker_address].push_back(task->id);
  for (const PendingTask* pending : state.PendingTasks(job_id)) {
    const Task* task = state.FindTask(pending->task_id);
    if (task != nullptr) by_worker[task->worker_address].push_back(task->id);
  }
  return by_worker;
}

JobGcPlan PlanJobGc(const DispatcherState& state, const Stamp& stamp, const DataPolicy& policy) {
  JobGcPlan plan;
  const int64_t now = stamp.time_micros;
  const int64_t timeout = static_cast<int64_t>(policy.job_gc_timeout_ms) * 1000;
  for (const Job* job : state.ListJobs()) {
    if (job->finished || job->num_clients > 0 || job->last_client_released_micros < 0) continue;
    if (now - job->last_client_released_micros < timeout) continue;
    // Collecting one job touches no other's tasks: each is planned on `state`.
    CollectedJob collected{job->id, TasksByWorker(state, job->id)};
    plan.updates.Add(stamp.time_micros).initGarbageCollectJob().setJobId(job->id);
    for (const auto& [address, ids] : collected.tasks) {
      plan.soft.removals_forgotten.insert(plan.soft.removals_forgotten.end(), ids.begin(),
                                          ids.end());
    }
    plan.jobs.push_back(std::move(collected));
  }
  return plan;
}

}  // namespace dispatch::state
