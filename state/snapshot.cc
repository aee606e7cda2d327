// Snapshots: the whole state as one journal::StateSnapshot, every list in id
// order, and back. FromSnapshot loads the records, rebuilds the indexes and
// refuses (DataLoss) anything this code could not have written.

#include <string>
#include <utility>

#include "state/bytes.h"
#include "state/dispatcher_state.h"

namespace dispatch::state {

namespace {

constexpr uint32_t kSnapshotFormat = 1;

template <typename Map, typename Record>
Status Insert(Map& map, uint64_t id, Record record, const char* what) {
  if (id == 0) return DataLossError(std::string("snapshot holds ") + what + " 0");
  if (!map.emplace(id, std::move(record)).second) {
    return DataLossError(std::string("snapshot holds ") + what + " " + std::to_string(id) +
                         " twice");
  }
  return Status::Ok();
}

template <typename List>
void FillU64(List list, const auto& values) {
  unsigned i = 0;
  for (uint64_t v : values) list.set(i++, v);
}

}  // namespace

void DispatcherState::WriteSnapshot(journal::StateSnapshot::Builder s) const {
  s.setFormatVersion(kSnapshotFormat);
  s.setNextDatasetId(next_dataset_id_);
  s.setNextWorkerId(next_worker_id_);
  s.setNextJobId(next_job_id_);
  s.setNextTaskId(next_task_id_);
  s.setNextJobClientId(next_job_client_id_);
  s.setNextClosureId(next_closure_id_);
  s.setNextResourceId(next_resource_id_);
  s.setNextQueuePosition(next_queue_position_);
  s.setLastTimeMicros(last_time_micros_);
  s.setNumApplied(num_applied_);

  auto datasets = s.initDatasets(datasets_.size());
  unsigned i = 0;
  for (const auto& [id, d] : datasets_) {
    auto r = datasets[i++];
    r.setDatasetId(id);
    r.setFingerprint(d.fingerprint);
    r.setMetadata(AsData(d.metadata));
    r.setDefinitionKey(AsText(d.definition_key));
    r.setHasElementSpec(d.element_spec.has_value());
    if (d.element_spec.has_value()) r.setElementSpec(AsData(*d.element_spec));
    r.setRegisteredMicros(d.registered_micros);
    r.setKind(AsText(d.kind));
  }

  auto workers = s.initWorkers(workers_.size());
  i = 0;
  for (const auto& [id, w] : workers_) {
    auto r = workers[i++];
    r.setWorkerId(id);
    r.setAddress(AsText(w.address));
    r.setTransferAddress(AsText(w.transfer_address));
    auto tags = r.initTags(w.tags.size());
    for (unsigned t = 0; t < w.tags.size(); ++t) tags.set(t, AsText(w.tags[t]));
    r.setIncarnation(w.incarnation);
    r.setRegisteredMicros(w.registered_micros);
    auto kinds = r.initDatasetKinds(w.dataset_kinds.size());
    unsigned k = 0;
    for (const std::string& kind : w.dataset_kinds) kinds.set(k++, AsText(kind));
  }

  auto jobs = s.initJobs(jobs_.size());
  i = 0;
  for (const auto& [id, j] : jobs_) {
    auto r = jobs[i++];
    r.setJobId(id);
    r.setDatasetId(j.dataset_id);
    r.setProcessingMode(j.processing_mode);
    r.setIsNamed(j.named_key.has_value());
    if (j.named_key.has_value()) {
      r.getNamedKey().setName(AsText(j.named_key->name));
      r.getNamedKey().setIndex(j.named_key->index);
    }
    r.setNumConsumers(j.num_consumers);
    r.setTargetWorkers(j.target_workers);
    r.setRequeueUnfinishedSplits(j.requeue_unfinished_splits);
    auto providers = r.initProviders(j.providers.size());
    for (unsigned p = 0; p < j.providers.size(); ++p) {
      providers[p].setRepetition(j.providers[p].repetition);
      providers[p].setNextIndex(j.providers[p].next_index);
      FillU64(providers[p].initRequeued(j.providers[p].requeued.size()), j.providers[p].requeued);
    }
    r.setNumClients(j.num_clients);
    r.setLastClientReleasedMicros(j.last_client_released_micros);
    r.setGarbageCollected(j.garbage_collected);
    r.setFinished(j.finished);
    r.setCreatedMicros(j.created_micros);
    auto pending = r.initPendingTasks(j.pending_tasks.size());
    for (unsigned p = 0; p < j.pending_tasks.size(); ++p) {
      pending[p].setTaskId(j.pending_tasks[p].task_id);
      pending[p].setTargetRound(j.pending_tasks[p].target_round);
      pending[p].setFailures(j.pending_tasks[p].failures);
      FillU64(pending[p].initReadyClients(j.pending_tasks[p].ready_clients.size()),
              j.pending_tasks[p].ready_clients);
    }
  }

  auto tasks = s.initTasks(tasks_.size());
  i = 0;
  for (const auto& [id, t] : tasks_) {
    auto r = tasks[i++];
    r.setTaskId(id);
    r.setJobId(t.job_id);
    r.setWorkerAddress(AsText(t.worker_address));
    r.setTransferAddress(AsText(t.transfer_address));
    r.setStartingRound(t.starting_round);
    r.setPending(t.pending);
    r.setFinished(t.finished);
  }

  auto clients = s.initJobClients(job_clients_.size());
  i = 0;
  for (const auto& [id, c] : job_clients_) {
    auto r = clients[i++];
    r.setJobClientId(id);
    r.setJobId(c.job_id);
    r.setAcquiredMicros(c.acquired_micros);
  }

  auto grants = s.initSplitGrants(split_grants_.size());
  i = 0;
  for (const auto& [requester, g] : split_grants_) {
    auto r = grants[i++];
    r.setTaskId(requester.task_id);
    r.setProviderIndex(requester.provider_index);
    r.setSequence(g.sequence);
    r.setRepetition(g.repetition);
    FillU64(r.initSplitIndices(g.split_indices.size()), g.split_indices);
    r.setEndOfSplits(g.end_of_splits);
    r.setOutstanding(g.outstanding);
  }

  auto closures = s.initClosures(closures_.size());
  i = 0;
  for (const Closure* closure : ClosuresInIdOrder()) {
    const uint64_t id = closure->id;
    const Closure& c = *closure;
    auto r = closures[i++];
    r.setClosureId(id);
    r.setCoordinatorId(c.coordinator_id);
    r.setFunctionName(AsText(c.function_name));
    r.setArgs(AsData(c.args));
    r.setState(c.state);
    r.setWorkerId(c.worker_id);
    r.setAttempts(c.attempts);
    r.setQueuePosition(c.queue_position);
    r.setResult(AsData(c.result));
    r.setError(AsText(c.error));
    r.setUserError(c.user_error);
    r.setScheduledMicros(c.scheduled_micros);
    r.setDoneMicros(c.done_micros);
    r.setRequestId(c.request_id);
    FillU64(r.initResources(c.resources.size()), c.resources);
    r.setTransientFailures(c.transient_failures);
    r.setResultStored(c.result_stored);
    r.setResultSize(c.result_size);
    r.setResultCrc(c.result_crc);
    r.setPriority(c.priority);
    r.setDeadlineMicros(c.deadline_micros);
    FillU64(r.initInputs(c.inputs.size()), c.inputs);
  }

  auto resources = s.initResources(resources_.size());
  i = 0;
  for (const auto& [id, res] : resources_) {
    auto r = resources[i++];
    r.setResourceId(id);
    r.setCoordinatorId(res.coordinator_id);
    r.setFunctionName(AsText(res.function_name));
    r.setArgs(AsData(res.args));
    r.setRequestId(res.request_id);
  }

  auto errors = s.initCoordinatorErrors(coordinator_errors_.size());
  i = 0;
  for (const auto& [id, e] : coordinator_errors_) {
    auto r = errors[i++];
    r.setCoordinatorId(id);
    r.setClosureId(e.closure_id);
    r.setError(AsText(e.error));
  }
}

Result<DispatcherState> DispatcherState::FromSnapshot(journal::StateSnapshot::Reader s) {
  if (s.getFormatVersion() != kSnapshotFormat) {
    return DataLossError("snapshot format " + std::to_string(s.getFormatVersion()) + " is not " +
                         std::to_string(kSnapshotFormat));
  }
  DispatcherState state;
  state.next_dataset_id_ = s.getNextDatasetId();
  state.next_worker_id_ = s.getNextWorkerId();
  state.next_job_id_ = s.getNextJobId();
  state.next_task_id_ = s.getNextTaskId();
  state.next_job_client_id_ = s.getNextJobClientId();
  state.next_closure_id_ = s.getNextClosureId();
  state.next_resource_id_ = s.getNextResourceId();
  state.next_queue_position_ = s.getNextQueuePosition();
  state.last_time_micros_ = s.getLastTimeMicros();
  state.num_applied_ = s.getNumApplied();
  // Every counter starts at 1 and only grows (id 0 is reserved), so a zero
  // one was never written: loaded, it would hand out id 0 (found by the
  // snapshot fuzz target: a message of defaults loaded, then every schedule
  // was refused with "closure id 0 is reserved").
  const std::pair<uint64_t, const char*> counters[] = {
      {state.next_dataset_id_, "dataset id"},   {state.next_worker_id_, "worker id"},
      {state.next_job_id_, "job id"},           {state.next_task_id_, "task id"},
      {state.next_job_client_id_, "job client id"}, {state.next_closure_id_, "closure id"},
      {state.next_resource_id_, "resource id"}, {state.next_queue_position_, "queue position"}};
  for (const auto& [value, what] : counters) {
    if (value == 0) return DataLossError(std::string("snapshot holds next ") + what + " 0");
  }

  for (auto r : s.getDatasets()) {
    Dataset d;
    d.id = r.getDatasetId();
    d.fingerprint = r.getFingerprint();
    d.metadata = ToString(r.getMetadata());
    d.definition_key = ToString(r.getDefinitionKey());
    if (r.getHasElementSpec()) d.element_spec = ToString(r.getElementSpec());
    d.registered_micros = r.getRegisteredMicros();
    d.kind = ToString(r.getKind());
    DISPATCH_RETURN_IF_ERROR(Insert(state.datasets_, d.id, std::move(d), "dataset"));
  }
  for (auto r : s.getWorkers()) {
    Worker w;
    w.id = r.getWorkerId();
    w.address = ToString(r.getAddress());
    w.transfer_address = ToString(r.getTransferAddress());
    for (auto tag : r.getTags()) w.tags.push_back(ToString(tag));
    w.incarnation = r.getIncarnation();
    w.registered_micros = r.getRegisteredMicros();
    for (auto kind : r.getDatasetKinds()) w.dataset_kinds.insert(ToString(kind));
    DISPATCH_RETURN_IF_ERROR(Insert(state.workers_, w.id, std::move(w), "worker"));
  }
  for (auto r : s.getJobs()) {
    Job j;
    j.id = r.getJobId();
    j.dataset_id = r.getDatasetId();
    j.processing_mode = r.getProcessingMode();
    if (r.getIsNamed())
      j.named_key = NamedJobKey{ToString(r.getNamedKey().getName()), r.getNamedKey().getIndex()};
    j.num_consumers = r.getNumConsumers();
    j.target_workers = r.getTargetWorkers();
    j.requeue_unfinished_splits = r.getRequeueUnfinishedSplits();
    // Checked before building them: a list of empty structs costs the
    // encoding nothing, each progress entry a deque's allocation.
    if (r.getProviders().size() > kMaxSplitProviders) {
      return DataLossError("job " + std::to_string(j.id) + " in the snapshot has " +
                           std::to_string(r.getProviders().size()) + " split providers, more than " +
                           std::to_string(kMaxSplitProviders));
    }
    j.providers.reserve(r.getProviders().size());
    for (auto p : r.getProviders()) {
      SplitProviderProgress progress;
      progress.repetition = p.getRepetition();
      progress.next_index = p.getNextIndex();
      for (uint64_t index : p.getRequeued()) progress.requeued.push_back(index);
      j.providers.push_back(std::move(progress));
    }
    j.num_clients = r.getNumClients();
    j.last_client_released_micros = r.getLastClientReleasedMicros();
    j.garbage_collected = r.getGarbageCollected();
    j.finished = r.getFinished();
    j.created_micros = r.getCreatedMicros();
    for (auto p : r.getPendingTasks()) {
      PendingTask pending;
      pending.task_id = p.getTaskId();
      pending.target_round = p.getTargetRound();
      pending.failures = p.getFailures();
      for (uint64_t client : p.getReadyClients()) pending.ready_clients.insert(client);
      j.pending_tasks.push_back(std::move(pending));
    }
    DISPATCH_RETURN_IF_ERROR(Insert(state.jobs_, j.id, std::move(j), "job"));
  }
  for (auto r : s.getTasks()) {
    Task t;
    t.id = r.getTaskId();
    t.job_id = r.getJobId();
    t.worker_address = ToString(r.getWorkerAddress());
    t.transfer_address = ToString(r.getTransferAddress());
    t.starting_round = r.getStartingRound();
    t.pending = r.getPending();
    t.finished = r.getFinished();
    DISPATCH_RETURN_IF_ERROR(Insert(state.tasks_, t.id, std::move(t), "task"));
  }
  for (auto r : s.getJobClients()) {
    JobClient c{r.getJobClientId(), r.getJobId(), r.getAcquiredMicros()};
    DISPATCH_RETURN_IF_ERROR(Insert(state.job_clients_, c.id, c, "job client"));
  }
  for (auto r : s.getSplitGrants()) {
    SplitGrant g;
    g.sequence = r.getSequence();
    g.repetition = r.getRepetition();
    for (uint64_t index : r.getSplitIndices()) g.split_indices.push_back(index);
    g.end_of_splits = r.getEndOfSplits();
    g.outstanding = r.getOutstanding();
    SplitRequester requester{r.getTaskId(), r.getProviderIndex()};
    if (!state.split_grants_.emplace(requester, std::move(g)).second) {
      return DataLossError("snapshot holds the split grant of task " +
                           std::to_string(requester.task_id) + " provider " +
                           std::to_string(requester.provider_index) + " twice");
    }
  }
  for (auto r : s.getClosures()) {
    Closure c;
    c.id = r.getClosureId();
    c.coordinator_id = r.getCoordinatorId();
    c.function_name = ToString(r.getFunctionName());
    c.args = ToString(r.getArgs());
    c.state = r.getState();
    if (ClosureStateSlot(c.state) >= kClosureStateCount) {
      return DataLossError("snapshot holds closure " + std::to_string(c.id) +
                           " in unknown state " + std::to_string(ClosureStateSlot(c.state)));
    }
    c.worker_id = r.getWorkerId();
    c.attempts = r.getAttempts();
    c.queue_position = r.getQueuePosition();
    c.result = ToString(r.getResult());
    c.error = ToString(r.getError());
    c.user_error = r.getUserError();
    c.scheduled_micros = r.getScheduledMicros();
    c.done_micros = r.getDoneMicros();
    c.request_id = r.getRequestId();
    for (uint64_t resource : r.getResources()) c.resources.push_back(resource);
    c.transient_failures = r.getTransientFailures();
    c.result_stored = r.getResultStored();
    c.result_size = r.getResultSize();
    c.result_crc = r.getResultCrc();
    c.priority = r.getPriority();
    c.deadline_micros = r.getDeadlineMicros();
    for (uint64_t input : r.getInputs()) c.inputs.push_back(input);
    DISPATCH_RETURN_IF_ERROR(Insert(state.closures_, c.id, std::move(c), "closure"));
  }
  for (auto r : s.getResources()) {
    PerWorkerResource res;
    res.id = r.getResourceId();
    res.coordinator_id = r.getCoordinatorId();
    res.function_name = ToString(r.getFunctionName());
    res.args = ToString(r.getArgs());
    res.request_id = r.getRequestId();
    DISPATCH_RETURN_IF_ERROR(Insert(state.resources_, res.id, std::move(res), "resource"));
  }
  for (auto r : s.getCoordinatorErrors()) {
    CoordinatorError e{r.getClosureId(), ToString(r.getError())};
    if (!state.coordinator_errors_.emplace(r.getCoordinatorId(), std::move(e)).second) {
      return DataLossError("snapshot holds the error of coordinator " +
                           std::to_string(r.getCoordinatorId()) + " twice");
    }
  }
  state.RebuildIndexes();
  DISPATCH_RETURN_IF_ERROR(state.CheckReferences());
  return state;
}

}  // namespace dispatch::state
