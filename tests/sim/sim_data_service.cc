// SimDispatcher: the data service's handlers and timers, building the same
// Updates as reactor/worker_service.cc, split_service.cc, job_service.cc,
// dataset_service.cc and gc_timers.cc, from the same state queries. A
// dataset's metadata holds its split source here: "<splits> <repetitions>".

#include <algorithm>
#include <cstdio>
#include <string>

#include "state/closure_endings.h"
#include "state/task_routing.h"
#include "tests/sim/sim_dispatcher.h"

namespace dispatch::sim {
namespace {

struct SplitSource {
  uint64_t num_splits = 0;
  int64_t repetitions = 1;
};

SplitSource SourceOf(const state::DispatcherState& state, uint64_t dataset_id) {
  SplitSource source;
  const state::Dataset* dataset = state.FindDataset(dataset_id);
  if (dataset == nullptr) return source;
  unsigned long long splits = 0;
  long long reps = 1;
  std::sscanf(dataset->metadata.c_str(), "%llu %lld", &splits, &reps);
  source.num_splits = splits;
  source.repetitions = reps;
  return source;
}

}  // namespace

TaskInfo SimDispatcher::InfoOf(const state::Task& task) const {
  const state::Job* job = state_.FindJob(task.job_id);
  return TaskInfo{task.id, task.job_id, job->IsDynamic(),
                  SourceOf(state_, job->dataset_id).repetitions};
}

void SimDispatcher::WorkerHeartbeat(uint64_t conn, const HeartbeatRequest& request,
                                    std::function<void(const HeartbeatReply&)> reply) {
  const std::string& address = request.address;
  const state::Worker* worker = state_.FindWorkerByAddress(address);
  const bool replaced =
      worker != nullptr && request.incarnation != 0 && worker->incarnation != request.incarnation;
  bool registered = false;
  if (worker == nullptr || replaced) {
    if (replaced && !RemoveWorkerAt(address, "a new worker process took its address").ok()) return;
    const uint64_t worker_id = state_.NextWorkerId();
    if (!SubmitBuilt([&](journal::Update::Builder u) {
           auto reg = u.initRegisterWorker();
           reg.setWorkerId(worker_id);
           reg.setAddress(address);
           reg.setTransferAddress(address + ":transfer");
           reg.setIncarnation(request.incarnation);
         }).ok()) {
      return;
    }
    worker = state_.FindWorker(worker_id);
    registered = true;
  }
  // WorkerRegistry::Heartbeat.
  auto [it, inserted] = registry_.try_emplace(address);
  Entry& entry = it->second;
  const bool attached = inserted || entry.conn != conn || entry.worker_id != worker->id;
  entry.worker_id = worker->id;
  entry.conn = conn;
  entry.last_heartbeat_ms = ctx_.net.now_ms();
  entry.control = request.control;
  if (registered || attached) CreateMissingTasks(address);
  // ClosureDispatcher::OnWorkerHeartbeat.
  auto [live, new_live] = live_.try_emplace(worker->id);
  if (new_live || registered || attached) {
    // A new link: the worker drops the outcomes of closures pushed on its
    // earlier connections, so those runs are lost (pinned seeds 27, 216, 226, 255).
    Carry(state::PlanWorkerLost(state_, Policy(), worker->id,
                                "it reconnected; its earlier connection's runs are dropped",
                                Stamp()))
        .ok();
    live->second.address = address;
    live->second.worker.worker_id = worker->id;
    live->second.worker.eligible_at_ms =
        static_cast<uint64_t>(ctx_.net.now_ms()) +
        state::StartDelayMs(ctx_.params.policy, workers_attached_++);
  }
  live->second.worker.functions = request.functions;
  live->second.worker.slots = request.slots;
  live->second.worker.paused = false;

  HeartbeatReply out;
  out.worker_id = worker->id;
  out.dispatcher_incarnation = incarnation_;
  std::set<uint64_t> current(request.current_tasks.begin(), request.current_tasks.end());
  std::set<uint64_t> assigned;
  for (const state::Task* task : state_.TasksForWorker(address)) {
    assigned.insert(task->id);
    if (!current.contains(task->id)) out.new_tasks.push_back(InfoOf(*task));
  }
  for (uint64_t id : current)
    if (!assigned.contains(id)) out.tasks_to_delete.push_back(id);
  Park(conn, [reply, out] { reply(out); });
}

void SimDispatcher::CreateMissingTasks(const std::string& address) {
  // The reactor's routing decision (state/task_routing.h); simulated workers
  // announce no dataset kinds, so every unfinished job.
  for (uint64_t job_id : state::JobsNeedingTask(state_, address)) CreateTask(job_id, address);
}

void SimDispatcher::CreateTask(uint64_t job_id, const std::string& address) {
  const uint64_t task_id = state_.NextTaskId();
  SubmitBuilt([&](journal::Update::Builder u) {
    auto create = u.initCreateTask();
    create.setTaskId(task_id);
    create.setJobId(job_id);
    create.setWorkerAddress(address);
  }).ok();
}

void SimDispatcher::CreateTasksForJob(uint64_t job_id) {
  for (const std::string& address : state::WorkersNeedingTask(state_, job_id)) {
    CreateTask(job_id, address);
  }
}

void SimDispatcher::WorkerUpdate(uint64_t conn, const std::vector<uint64_t>& completed_tasks) {
  (void)conn;
  for (uint64_t task_id : completed_tasks) {
    const state::Task* task = state_.FindTask(task_id);
    if (task == nullptr || task->finished || task->pending) continue;
    SubmitBuilt([&](journal::Update::Builder u) { u.initFinishTask().setTaskId(task_id); }).ok();
  }
}

void SimDispatcher::GetSplit(uint64_t conn, const SplitRequest& request,
                             std::function<void(const SplitReply&)> reply) {
  SplitReply out;
  auto answer = [&] { Park(conn, [reply, out] { reply(out); }); };
  const state::Task* task = state_.FindTask(request.task_id);
  if (task == nullptr) {
    out.status = NotFoundError("task " + std::to_string(request.task_id) + " is unknown");
    return answer();
  }
  const state::Job* job = state_.FindJob(task->job_id);
  if (!job->IsDynamic()) {
    out.status = FailedPreconditionError("job is not DYNAMIC");
    return answer();
  }
  const SplitSource source = SourceOf(state_, job->dataset_id);
  uint64_t sequence = request.sequence;
  if (const state::SplitGrant* grant = state_.FindSplitGrant(task->id, 0)) {
    if (sequence == grant->sequence) {
      if (ctx_.bug != SimBug::kSplitRetryNotIdempotent) {
        out.repetition = grant->repetition;
        out.end_of_splits = grant->end_of_splits;
        out.indices = grant->split_indices;
        return answer();
      }
      sequence = grant->sequence + 1;  // the planted bug: a retry is a new request
    } else if (sequence < grant->sequence) {
      out.status = FailedPreconditionError("sequence " + std::to_string(sequence) +
                                           " is older than its last request");
      return answer();
    }
  }
  if (job->garbage_collected) {
    out.status = FailedPreconditionError("job has been garbage-collected");
    return answer();
  }
  if (task->finished) {
    out.status = FailedPreconditionError("task is finished");
    return answer();
  }
  const state::SplitProviderProgress& progress = job->providers[0];
  out.repetition = request.repetition;
  if (job->finished || request.repetition < progress.repetition) {
    out.end_of_splits = true;  // that repetition is over for everyone
    return answer();
  }
  if (request.repetition > progress.repetition) {
    out.status = FailedPreconditionError("split provider is at repetition " +
                                         std::to_string(progress.repetition));
    return answer();
  }
  const uint64_t wanted = std::max<uint32_t>(request.max_splits, 1);
  for (uint64_t index : progress.requeued) {
    if (out.indices.size() >= wanted) break;
    out.indices.push_back(index);
  }
  for (uint64_t next = progress.next_index; out.indices.size() < wanted && next < source.num_splits;
       ++next) {
    out.indices.push_back(next);
  }
  out.end_of_splits = out.indices.empty();
  const uint64_t job_id = job->id;
  Status status = SubmitBuilt([&](journal::Update::Builder u) {
    auto produce = u.initProduceSplit();
    produce.setJobId(job_id);
    produce.setRepetition(request.repetition);
    produce.setProviderIndex(0);
    produce.setTaskId(request.task_id);
    produce.setSequence(sequence);
    auto list = produce.initSplitIndices(static_cast<unsigned>(out.indices.size()));
    for (size_t i = 0; i < out.indices.size(); ++i) list.set(i, out.indices[i]);
    produce.setEndOfSplits(out.end_of_splits);
  });
  if (!status.ok()) return;
  answer();
}

void SimDispatcher::RegisterDataset(uint64_t conn, uint64_t fingerprint, uint64_t num_splits,
                                    int64_t repetitions, std::function<void(uint64_t)> reply) {
  const state::Dataset* known = state_.FindDatasetByFingerprint(fingerprint);
  uint64_t dataset_id = known != nullptr ? known->id : state_.NextDatasetId();
  if (known == nullptr) {
    const std::string metadata = std::to_string(num_splits) + " " + std::to_string(repetitions);
    if (!SubmitBuilt([&](journal::Update::Builder u) {
           auto reg = u.initRegisterDataset();
           reg.setDatasetId(dataset_id);
           reg.setFingerprint(fingerprint);
           reg.setMetadata(capnp::Data::Reader(
               reinterpret_cast<const capnp::byte*>(metadata.data()), metadata.size()));
           reg.setDefinitionKey("dataset-" + std::to_string(dataset_id));
         }).ok()) {
      return;
    }
  }
  Park(conn, [reply, dataset_id] { reply(dataset_id); });
}

void SimDispatcher::GetOrCreateJob(uint64_t conn, const JobRequest& request,
                                   std::function<void(const JobReply&)> reply) {
  JobReply out;
  auto acquire = [&](uint64_t job_id) {
    const uint64_t client_id = state_.NextJobClientId();
    out.status = SubmitBuilt([&](journal::Update::Builder u) {
      auto acquire = u.initAcquireJobClient();
      acquire.setJobClientId(client_id);
      acquire.setJobId(job_id);
    });
    out.job_id = job_id;
    out.job_client_id = client_id;
    client_seen_ms_[client_id] = ctx_.net.now_ms();
  };
  const bool named = !request.name.empty();
  const state::Job* job = named ? state_.FindNamedJob({request.name, 0}) : nullptr;
  if (job != nullptr && !job->garbage_collected) {
    acquire(job->id);
  } else {
    const uint64_t job_id = state_.NextJobId();
    out.status = SubmitBuilt([&](journal::Update::Builder u) {
      auto create = u.initCreateJob();
      create.setJobId(job_id);
      create.setDatasetId(request.dataset_id);
      create.setProcessingMode(request.dynamic ? rpc::ProcessingMode::DYNAMIC
                                               : rpc::ProcessingMode::OFF);
      if (named) {
        auto key = create.getNamedKey().initNamed();
        key.setName(request.name);
        key.setIndex(0);
      } else {
        create.getNamedKey().setAnonymous();
      }
      create.setNumSplitProviders(request.dynamic ? 1 : 0);
      create.setRequeueUnfinishedSplits(request.dynamic && request.requeue);
    });
    if (out.status.ok()) {
      acquire(job_id);
      CreateTasksForJob(job_id);
    }
  }
  Park(conn, [reply, out] { reply(out); });
}

void SimDispatcher::ClientHeartbeat(uint64_t conn, uint64_t client_id,
                                    std::function<void(const ClientHeartbeatReply&)> reply) {
  ClientHeartbeatReply out;
  const state::JobClient* client = state_.FindJobClient(client_id);
  if (client == nullptr) {
    out.status = NotFoundError("job client " + std::to_string(client_id) + " is unknown");
  } else {
    const state::Job* job = state_.FindJob(client->job_id);
    if (job->garbage_collected) {
      out.status = FailedPreconditionError("job has been garbage-collected");
    } else {
      client_seen_ms_[client_id] = ctx_.net.now_ms();
      out.job_finished = job->finished;
    }
  }
  Park(conn, [reply, out] { reply(out); });
}

void SimDispatcher::ReleaseJobClient(uint64_t conn, uint64_t client_id,
                                     std::function<void(Status)> reply) {
  Status status = state_.GetJobClient(client_id).status();
  if (status.ok()) {
    status = SubmitBuilt(
        [&](journal::Update::Builder u) { u.initReleaseJobClient().setJobClientId(client_id); });
    client_seen_ms_.erase(client_id);
  }
  Park(conn, [reply, status] { reply(status); });
}

void SimDispatcher::RunTimers() {
  const int64_t now = ctx_.net.now_ms();
  // Liveness: workers past the timeout are removed, consumers released.
  std::vector<std::string> expired;
  for (const auto& [address, entry] : registry_)
    if (now - entry.last_heartbeat_ms > ctx_.params.worker_timeout_ms) expired.push_back(address);
  for (const std::string& address : expired)
    RemoveWorkerAt(address, "no heartbeat within the worker timeout").ok();
  std::vector<uint64_t> timed_out;
  for (const auto& [client_id, seen] : client_seen_ms_)
    if (now - seen > ctx_.params.client_timeout_ms) timed_out.push_back(client_id);
  for (uint64_t client_id : timed_out) {
    client_seen_ms_.erase(client_id);
    if (state_.FindJobClient(client_id) == nullptr) continue;
    SubmitBuilt([&](journal::Update::Builder u) {
      u.initReleaseJobClient().setJobClientId(client_id);
    }).ok();
  }
  // Closure deadlines (ClosureDispatcher's deadline timer).
  state::EndingPlan deadlines = state::PlanDeadlines(state_, Stamp());
  if (!deadlines.updates.empty() && Carry(deadlines.updates).ok())
    TellWorkersToDrop(deadlines.running);
  // Job GC, every 50 ms.
  if (now < next_gc_ms_) return;
  next_gc_ms_ = now + 50;
  const int64_t now_micros = NowMicros();
  for (const state::Job* job : state_.ListUnfinishedJobs()) {
    if (job->num_clients > 0 || job->last_client_released_micros < 0) continue;
    if (now_micros - job->last_client_released_micros < ctx_.params.job_gc_timeout_ms * 1000)
      continue;
    const uint64_t job_id = job->id;
    SubmitBuilt([&](journal::Update::Builder u) {
      u.initGarbageCollectJob().setJobId(job_id);
    }).ok();
  }
}

}  // namespace dispatch::sim
