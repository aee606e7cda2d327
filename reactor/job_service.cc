// DispatcherService: jobs and their consumers. getOrCreateJob creates a job
// (anonymous: always; named: unless a live job holds the name and index) with
// a task on every registered worker, or joins the named one; every caller
// gets its own job client. clientHeartbeat answers the job's task list (only
// when it changed since the version the client holds) and drives round-robin
// agreement on pending tasks; maybeRemoveTask removes a round-robin task once
// every consumer asked at the same round.

#include <algorithm>
#include <string>

#include "reactor/data_service.h"
#include "reactor/service_util.h"
#include "reactor/services.h"
#include "reactor/task_info.h"

namespace dispatch::reactor {

using state::ProcessingModeName;
using state::TargetWorkersName;
namespace {

std::string KeyName(std::string_view name, int64_t index) {
  return "job name '" + std::string(name) + "' index " + std::to_string(index);
}

// Reusing a named job must ask for the job it is.
Status CheckMatchingJob(const state::Job& job, rpc::JobRequest::Reader request) {
  const std::string key = KeyName(job.named_key->name, job.named_key->index);
  const std::string held = key + " is held by job " + std::to_string(job.id);
  if (job.processing_mode != request.getProcessingMode()) {
    return FailedPreconditionError(held + " with processing mode " +
                                   ProcessingModeName(job.processing_mode) +
                                   "; this request asks for processing mode " +
                                   ProcessingModeName(request.getProcessingMode()));
  }
  if (job.target_workers != request.getTargetWorkers()) {
    return FailedPreconditionError(
        held + " with target workers " + TargetWorkersName(job.target_workers) +
        "; this request asks for target workers " + TargetWorkersName(request.getTargetWorkers()));
  }
  if (job.dataset_id != request.getDatasetId()) {
    return FailedPreconditionError(held + " of dataset " + std::to_string(job.dataset_id) +
                                   "; this request names dataset " +
                                   std::to_string(request.getDatasetId()));
  }
  if (job.num_consumers != request.getNumConsumers()) {
    return FailedPreconditionError(held + " with " + std::to_string(job.num_consumers) +
                                   " round-robin consumers; this request asks for " +
                                   std::to_string(request.getNumConsumers()));
  }
  return Status::Ok();
}

Status CheckNewJob(DataService& data, rpc::JobRequest::Reader request) {
  const rpc::ProcessingMode mode = request.getProcessingMode();
  if (mode > rpc::ProcessingMode::HINT) {
    return InvalidArgumentError("processing mode " + std::to_string(static_cast<unsigned>(mode)) +
                                " is unknown");
  }
  if (request.getTargetWorkers() > rpc::TargetWorkers::LOCAL) {
    return InvalidArgumentError("target workers " +
                                std::to_string(static_cast<unsigned>(request.getTargetWorkers())) +
                                " is unknown");
  }
  if (IsStaticSharding(mode) && data.options().worker_addresses.empty()) {
    return FailedPreconditionError(
        std::string("processing mode ") + ProcessingModeName(mode) +
        " shards by worker index and needs a fixed worker list, but none is "
        "configured: start the dispatcher with --worker-addresses");
  }
  if (request.getRequeueUnfinishedSplits() && mode != rpc::ProcessingMode::DYNAMIC) {
    return InvalidArgumentError(
        std::string("requeueUnfinishedSplits needs processing mode DYNAMIC, not ") +
        ProcessingModeName(mode));
  }
  if (mode == rpc::ProcessingMode::DYNAMIC) {
    auto source = data.datasets().SplitSource(request.getDatasetId());
    if (!source.ok()) return source.status();
    if ((*source)->kind == SplitSourceInfo::Kind::kNone) {
      return FailedPreconditionError(
          "dataset " + std::to_string(request.getDatasetId()) +
          " has no split source; a DYNAMIC job hands out splits and needs one");
    }
  }
  return Status::Ok();
}

Result<uint64_t> AcquireClient(DataService& data, uint64_t job_id) {
  const uint64_t client_id = data.state().NextJobClientId();
  DISPATCH_RETURN_IF_ERROR(data.Submit([&](journal::Update::Builder update) {
    auto acquire = update.initAcquireJobClient();
    acquire.setJobClientId(client_id);
    acquire.setJobId(job_id);
  }));
  data.consumers().Heartbeat(client_id, -1, data.durable().NowMicros());
  return client_id;
}

}  // namespace

kj::Promise<void> DispatcherService::getOrCreateJob(GetOrCreateJobContext context) {
  DataService& data = this->data();
  const auto& state = data.state();
  auto request = context.getParams().getRequest();
  const uint64_t dataset_id = request.getDatasetId();
  ThrowIfError(data.state().GetDataset(dataset_id).status());
  ThrowIfError(data.CheckName("job name", View(request.getJobName())));
  const bool named = request.getJobName().size() > 0;

  auto results = context.getResults();
  results.setIncarnation(data.incarnation());
  if (named) {
    state::NamedJobKey key{std::string(View(request.getJobName())), request.getJobNameIndex()};
    const state::Job* job = state.FindNamedJob(key);
    if (job != nullptr && !job->garbage_collected) {
      ThrowIfError(CheckMatchingJob(*job, request));
      const uint64_t job_id = job->id;
      results.setJobId(job_id);
      results.setJobClientId(ValueOrThrow(AcquireClient(data, job_id)));
      return data.durable().Barrier();
    }
  }
  ThrowIfError(CheckNewJob(data, request));
  const uint64_t job_id = state.NextJobId();
  ThrowIfError(data.Submit([&](journal::Update::Builder update) {
    auto create = update.initCreateJob();
    create.setJobId(job_id);
    create.setDatasetId(dataset_id);
    create.setProcessingMode(request.getProcessingMode());
    if (named) {
      auto key = create.getNamedKey().initNamed();
      key.setName(request.getJobName());
      key.setIndex(request.getJobNameIndex());
    } else {
      create.getNamedKey().setAnonymous();
    }
    create.setNumConsumers(request.getNumConsumers());
    create.setTargetWorkers(request.getTargetWorkers());
    create.setNumSplitProviders(
        request.getProcessingMode() == rpc::ProcessingMode::DYNAMIC ? 1 : 0);
    create.setRequeueUnfinishedSplits(request.getRequeueUnfinishedSplits());
  }));
  results.setJobId(job_id);
  results.setJobClientId(ValueOrThrow(AcquireClient(data, job_id)));
  ThrowIfError(data.CreateTasksForJob(job_id));
  return data.durable().Barrier();
}

kj::Promise<void> DispatcherService::clientHeartbeat(ClientHeartbeatContext context) {
  DataService& data = this->data();
  const auto& state = data.state();
  auto request = context.getParams().getRequest();
  const uint64_t client_id = request.getJobClientId();
  const state::JobClient* client = state.FindJobClient(client_id);
  if (client == nullptr) {
    if (uint64_t released_job = data.consumers().ReleasedJob(client_id)) {
      const state::Job* job = state.FindJob(released_job);
      if (job != nullptr && job->garbage_collected) {
        ThrowStatus(
            FailedPreconditionError("job " + std::to_string(released_job) +
                                    " has been garbage-collected after having no client for "
                                    "--job-gc-timeout-ms; consider a higher --job-gc-timeout-ms"));
      }
      ThrowStatus(NotFoundError(
          "job client " + std::to_string(client_id) + " of job " + std::to_string(released_job) +
          " was released (by the client, or after no heartbeat for --client-timeout-ms)"));
    }
    if (!data.options().fault_tolerant_mode) {
      ThrowStatus(NotFoundError(
          "job client " + std::to_string(client_id) +
          " is unknown; the dispatcher runs without fault-tolerant mode "
          "(--fault-tolerant-mode=false), so a dispatcher restart may have forgotten it"));
    }
    ThrowStatus(NotFoundError("job client " + std::to_string(client_id) +
                              " is unknown (released, timed out, or never created)"));
  }
  const uint64_t job_id = client->job_id;
  const state::Job* job = state.FindJob(job_id);
  if (job->garbage_collected) {
    ThrowStatus(
        FailedPreconditionError("job " + std::to_string(job_id) +
                                " has been garbage-collected after having no client for "
                                "--job-gc-timeout-ms; consider a higher --job-gc-timeout-ms"));
  }
  const int64_t current_round = request.getCurrentRound();
  const int64_t blocked_round = request.getBlockedRound();
  data.consumers().Heartbeat(client_id, current_round, data.durable().NowMicros());

  auto pending = state.PendingTasks(job_id);
  if (!pending.empty()) {
    const uint64_t task_id = pending.front()->task_id;
    const int64_t target = pending.front()->target_round;
    const int64_t failures = pending.front()->failures;
    // A consumer blocked at or before the target round can still start the
    // task there; one that is past it (or at it without blocking) cannot.
    const bool blocked_in_time = blocked_round >= 0 && blocked_round <= target;
    const bool accept = blocked_in_time && !pending.front()->ready_clients.contains(client_id);
    const bool reject = !blocked_in_time && current_round >= 0 && current_round >= target;
    if (accept || reject) {
      // Every rejection pushes the target exponentially further out.
      const int64_t offset = int64_t{2} << std::min<int64_t>(failures, 40);
      const int64_t new_target = std::max(data.consumers().Round(client_id), target) + offset;
      ThrowIfError(data.Submit([&](journal::Update::Builder update) {
        auto heartbeat = update.initClientHeartbeat();
        heartbeat.setJobClientId(client_id);
        heartbeat.setTaskId(task_id);
        if (accept) {
          heartbeat.getOutcome().setAccepted();
        } else {
          heartbeat.getOutcome().setRejected(new_target);
        }
      }));
    }
    pending = state.PendingTasks(job_id);
  }

  auto results = context.getResults();
  auto response = results.initResponse();
  response.setBlockRound(pending.empty() ? -1 : pending.front()->target_round);
  auto tasks = state.TasksForJob(job_id);
  const uint64_t version = TaskListVersion(tasks);
  response.setTaskListVersion(version);
  if (request.getKnownTaskListVersion() == version) {
    response.setTaskListChanged(false);
  } else {
    response.setTaskListChanged(true);
    auto list = response.initTasks(static_cast<unsigned>(tasks.size()));
    for (size_t i = 0; i < tasks.size(); ++i)
      FillTaskInfo(state, data.options(), *tasks[i], list[i]);
  }
  response.setJobFinished(job->finished);
  response.setIncarnation(data.incarnation());
  return data.durable().Barrier();
}

kj::Promise<void> DispatcherService::releaseJobClient(ReleaseJobClientContext context) {
  DataService& data = this->data();
  const uint64_t client_id = context.getParams().getJobClientId();
  context.getResults().setIncarnation(data.incarnation());
  if (data.state().FindJobClient(client_id) == nullptr && client_id != 0 &&
      client_id < data.state().NextJobClientId()) {
    // Issued and gone (released, or timed out): a retry after a lost reply.
    // Ids are never reused, so this is the same client, and it is released.
    return data.durable().Barrier();
  }
  const state::JobClient* client = ValueOrThrow(data.state().GetJobClient(client_id));
  const uint64_t job_id = client->job_id;
  ThrowIfError(data.Submit([client_id](journal::Update::Builder update) {
    update.initReleaseJobClient().setJobClientId(client_id);
  }));
  data.consumers().Released(client_id, job_id);
  return data.durable().Barrier();
}

kj::Promise<void> DispatcherService::maybeRemoveTask(MaybeRemoveTaskContext context) {
  DataService& data = this->data();
  const auto& state = data.state();
  auto params = context.getParams();
  const uint64_t task_id = params.getTaskId();
  auto results = context.getResults();
  results.setIncarnation(data.incarnation());
  const state::Task* task = state.FindTask(task_id);
  if (task == nullptr) {
    // Already removed (by this consumer's peers or an earlier retry).
    results.setRemoved(true);
    return data.durable().Barrier();
  }
  const state::Job* job = state.FindJob(task->job_id);
  if (!job->IsRoundRobin()) {
    ThrowStatus(FailedPreconditionError(
        "task " + std::to_string(task_id) + " belongs to job " + std::to_string(job->id) +
        ", which is not round robin; only round-robin tasks are removed"));
  }
  if (params.getConsumerIndex() >= job->num_consumers) {
    ThrowStatus(InvalidArgumentError("consumer index " + std::to_string(params.getConsumerIndex()) +
                                     " of job " + std::to_string(job->id) +
                                     " is out of range: it has " +
                                     std::to_string(job->num_consumers) + " consumers"));
  }
  if (task->pending) {
    ThrowStatus(FailedPreconditionError(
        "task " + std::to_string(task_id) +
        " is pending (not yet accepted by the consumers) and cannot be removed"));
  }
  const bool agreed = data.consumers().RequestRemoval(task_id, params.getConsumerIndex(),
                                                      params.getRound(), job->num_consumers);
  if (agreed) {
    const std::string address = task->worker_address;
    ThrowIfError(data.Submit([task_id](journal::Update::Builder update) {
      update.initRemoveTask().setTaskId(task_id);
    }));
    data.consumers().ForgetTask(task_id);
    data.workers().PushDeleteTasks(address, {task_id});
  }
  results.setRemoved(agreed);
  return data.durable().Barrier();
}

}  // namespace dispatch::reactor
