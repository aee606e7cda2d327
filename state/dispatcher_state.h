// DispatcherState: the dispatcher's whole state and the only code that changes
// it. Every change is a journal::Update: Check (a const function) says whether
// the update keeps every invariant and names the offending id when it does not;
// Apply runs Check and then changes the state, or changes nothing. Pure and
// deterministic: no I/O, no clock, no randomness; time and ids come inside the
// updates. Ordered containers give every listing a canonical order (by id).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "schema/journal.capnp.h"
#include "state/effects.h"
#include "state/index_util.h"
#include "state/records.h"

namespace dispatch::state {

class DispatcherState {
 public:
  DispatcherState() = default;
  // Copying is meant: tests compare a state with its copy, tools inspect one.
  DispatcherState(const DispatcherState&) = default;
  DispatcherState& operator=(const DispatcherState&) = default;
  DispatcherState(DispatcherState&&) = default;
  DispatcherState& operator=(DispatcherState&&) = default;

  // ---- Transitions -------------------------------------------------------

  // Ok when `update` may be applied to this state; otherwise an error naming
  // the offending id (NotFound, AlreadyExists, FailedPrecondition,
  // InvalidArgument).
  Status Check(journal::Update::Reader update) const;

  // Check, then apply. On error nothing changes. An update that passed Check
  // is applied completely. `effects`, when given, is cleared and filled with
  // what the update did (state/effects.h); replay passes none and pays
  // nothing for them.
  Status Apply(journal::Update::Reader update, Effects* effects = nullptr);

  // ---- Next ids: the reactor writes these into the updates it builds. -----

  uint64_t NextDatasetId() const { return next_dataset_id_; }
  uint64_t NextWorkerId() const { return next_worker_id_; }
  uint64_t NextJobId() const { return next_job_id_; }
  uint64_t NextTaskId() const { return next_task_id_; }
  uint64_t NextJobClientId() const { return next_job_client_id_; }
  uint64_t NextClosureId() const { return next_closure_id_; }
  uint64_t NextResourceId() const { return next_resource_id_; }
  // The time of the last applied update (0 before any).
  int64_t LastTimeMicros() const { return last_time_micros_; }
  // Number of updates applied since the empty state (snapshots keep it).
  uint64_t NumApplied() const { return num_applied_; }

  // ---- Datasets ----------------------------------------------------------

  const Dataset* FindDataset(uint64_t dataset_id) const;
  const Dataset* FindDatasetByFingerprint(uint64_t fingerprint) const;
  // NotFound "dataset 5 is unknown" when absent.
  Result<const Dataset*> GetDataset(uint64_t dataset_id) const;
  std::vector<const Dataset*> ListDatasets() const;

  // ---- Workers -----------------------------------------------------------

  const Worker* FindWorker(uint64_t worker_id) const;
  const Worker* FindWorkerByAddress(std::string_view address) const;
  Result<const Worker*> GetWorker(uint64_t worker_id) const;
  std::vector<const Worker*> ListWorkers() const;
  // The first `max` workers by id (a bounded listing: O(max), not O(workers)).
  std::vector<const Worker*> ListWorkers(size_t max) const;

  // ---- Jobs, tasks and job clients ---------------------------------------

  const Job* FindJob(uint64_t job_id) const;
  Result<const Job*> GetJob(uint64_t job_id) const;
  // The job that holds `key` now: the latest job created with it, which may be
  // garbage-collected (then a new job may take the key).
  const Job* FindNamedJob(const NamedJobKey& key) const;
  std::vector<const Job*> ListJobs() const;
  // Jobs that are not finished, by id (a returning worker gets tasks of these).
  std::vector<const Job*> ListUnfinishedJobs() const;

  const Task* FindTask(uint64_t task_id) const;
  Result<const Task*> GetTask(uint64_t task_id) const;
  // Unfinished tasks (active and pending) assigned to `address`, by id. They
  // outlive the worker's registration: a worker that comes back finds them
  // (until they are handed over: HandOverTask).
  std::vector<const Task*> TasksForWorker(std::string_view address) const;
  // The addresses that have unfinished tasks (active or pending), sorted.
  std::vector<std::string> TaskAddresses() const;
  // Active (not pending) tasks of the job, finished ones included, by id.
  std::vector<const Task*> TasksForJob(uint64_t job_id) const;
  // The job's task (active, pending or finished) on `address`, if any.
  const Task* FindTaskForJobAndWorker(uint64_t job_id, std::string_view address) const;
  // The job's pending round-robin tasks, front first (empty for unknown jobs).
  std::vector<const PendingTask*> PendingTasks(uint64_t job_id) const;

  const JobClient* FindJobClient(uint64_t job_client_id) const;
  Result<const JobClient*> GetJobClient(uint64_t job_client_id) const;
  std::vector<const JobClient*> ClientsForJob(uint64_t job_id) const;
  std::vector<const JobClient*> ListJobClients() const;

  // ---- Splits ------------------------------------------------------------

  // Progress of one split provider; nullptr unless the job is DYNAMIC and
  // has that provider.
  const SplitProviderProgress* FindSplitProvider(uint64_t job_id, uint32_t provider_index) const;
  // The last answer given to (task, provider), for idempotent getSplit.
  const SplitGrant* FindSplitGrant(uint64_t task_id, uint32_t provider_index) const;
  // Every grant of the job's tasks, by (task, provider).
  std::vector<std::pair<SplitRequester, const SplitGrant*>> SplitGrantsForJob(
      uint64_t job_id) const;

  // ---- Closures ----------------------------------------------------------

  const Closure* FindClosure(uint64_t closure_id) const;
  Result<const Closure*> GetClosure(uint64_t closure_id) const;
  // Queued closures in queue order (front first; merged from the queues by
  // kind, for tools and tests); other states by id. At most `max` of them.
  // Queued and assigned closures come from their indexes; waiting and done
  // ones from a walk of every closure (for tests and tools, not hot paths).
  std::vector<const Closure*> ClosuresInState(ClosureState state,
                                              size_t max = SIZE_MAX) const;
  size_t NumClosuresInState(ClosureState state) const;
  // The front of the queue, nullptr when it is empty.
  const Closure* NextQueuedClosure() const;
  size_t NumClosuresOnWorker(uint64_t worker_id) const;
  // Every closure of the coordinator that is not released, by id.
  std::vector<const Closure*> ClosuresForCoordinator(uint64_t coordinator_id) const;
  // How many of the coordinator's closures are waiting, queued or assigned (Done/Join).
  size_t NumUnfinishedClosures(uint64_t coordinator_id) const;
  // Closures assigned to the worker, by id.
  std::vector<const Closure*> ClosuresOnWorker(uint64_t worker_id) const;
  // The closure when it runs on `worker_id` as `attempt`; else nullptr (a
  // report about any other run is stale).
  const Closure* FindRunning(uint64_t closure_id, uint64_t worker_id, uint32_t attempt) const;
  // Waiting, queued and assigned closures of the coordinator, by id. Walks all
  // of its unreleased closures: only a first error needs them.
  std::vector<const Closure*> UnfinishedClosures(uint64_t coordinator_id) const;
  // The queue by kind of closure, each kind's in queue order: which closures
  // a worker could take is a question per kind (closure_planner.h).
  const ClosureQueues& QueuedByKind() const { return indexes_.queue_by_kind; }
  const CoordinatorError* FindCoordinatorError(uint64_t coordinator_id) const;
  // The earliest deadline of a queued or assigned closure (0: none has one).
  int64_t EarliestClosureDeadline() const;
  // Queued and assigned closures whose deadline is at or before `now_micros`,
  // earliest first.
  std::vector<const Closure*> ClosuresPastDeadline(int64_t now_micros) const;
  // The unreleased closure the coordinator scheduled with `request_id` (!= 0).
  const Closure* FindClosureByRequest(uint64_t coordinator_id, uint64_t request_id) const;
  const PerWorkerResource* FindResource(uint64_t resource_id) const;
  const PerWorkerResource* FindResourceByRequest(uint64_t coordinator_id,
                                                 uint64_t request_id) const;
  const std::map<uint64_t, PerWorkerResource>& resources() const { return resources_; }
  // Whether a closure that is not done has `closure_id` among its inputs (so
  // `closure_id` may not be released yet).
  bool IsNeededAsInput(uint64_t closure_id) const {
    return indexes_.needed_by.contains(closure_id);
  }
  // Whether any closure that is not done has inputs.
  bool HasDependants() const { return !indexes_.needed_by.empty(); }
  // The waiting closures that failing or cancelling `closure_ids` would fail
  // with them (their dependants, transitively), by id: what such an Update
  // does besides its own items (ClosureScheduled.inputs).
  std::vector<uint64_t> WaitingDependants(const std::vector<uint64_t>& closure_ids) const;

  // ---- Sizes (constant time, for metrics) --------------------------------

  size_t NumDatasets() const { return datasets_.size(); }
  size_t NumWorkers() const { return workers_.size(); }
  size_t NumJobs() const { return jobs_.size(); }
  size_t NumUnfinishedJobs() const { return indexes_.unfinished_jobs.size(); }
  // Tasks of every kind: active, pending (round robin) and finished.
  size_t NumTasks() const { return tasks_.size(); }
  size_t NumJobClients() const { return job_clients_.size(); }
  // Coordinators holding unreleased closures, by id, at most `max` of them.
  std::vector<uint64_t> CoordinatorIds(size_t max) const {
    std::vector<uint64_t> ids;
    for (const auto& [id, closures] : indexes_.closures_by_coordinator) {
      if (ids.size() >= max) break;
      if (!closures.empty()) ids.push_back(id);
    }
    return ids;
  }
  size_t NumCoordinators() const { return indexes_.closures_by_coordinator.size(); }

  // ---- Whole state -------------------------------------------------------

  // A 64-bit hash over every record in canonical order (indexes excluded:
  // they follow from the records). Equal states have equal digests.
  uint64_t Digest() const;

  // The state a restart without fault-tolerant mode begins from: every
  // record forgotten, every counter kept (next ids, so ids are never reused;
  // the clock and the count of applied updates, so time never goes back).
  // Built from an empty state, so a collection added later is forgotten too.
  DispatcherState EmptyKeepingCounters() const;

  // Writes the whole state. REQUIRES: `snapshot` is freshly initialised.
  void WriteSnapshot(journal::StateSnapshot::Builder snapshot) const;
  // Rebuilds a state from a snapshot; DataLoss when the snapshot is not one
  // this code could have written (dangling reference, duplicate id, ...).
  static Result<DispatcherState> FromSnapshot(journal::StateSnapshot::Reader snapshot);

  // Internal when an index disagrees with the records it is derived from.
  // Tests call it after every Apply; FromSnapshot relies on it.
  Status CheckIndexes() const;

 private:
  // Every closure, by ascending id (closures_ is unordered).
  std::vector<const Closure*> ClosuresInIdOrder() const;

  // Derived lookups, rebuilt from the records by RebuildIndexes.
  struct Indexes {
    std::map<uint64_t, uint64_t> dataset_by_fingerprint;
    std::map<std::string, uint64_t, std::less<>> dataset_by_definition_key;
    std::map<std::string, uint64_t, std::less<>> worker_by_address;
    std::map<NamedJobKey, uint64_t> job_by_name;
    std::set<uint64_t> unfinished_jobs;
    // Unfinished tasks, active and pending, by worker address.
    std::map<std::string, std::set<uint64_t>, std::less<>> tasks_by_worker;
    // Active tasks, finished ones included, by job.
    std::map<uint64_t, std::set<uint64_t>> tasks_by_job;
    std::map<std::pair<uint64_t, std::string>, uint64_t, std::less<>> task_by_job_worker;
    std::map<uint64_t, std::set<uint64_t>> clients_by_job;
    // The queue: queued closures by kind, each kind's by queue position.
    ClosureQueues queue_by_kind;
    std::map<uint64_t, IdSet> closures_by_worker;
    std::map<uint64_t, IdSet> closures_by_coordinator;
    // (coordinator, request id) -> closure, for closures with a request id.
    std::unordered_map<std::pair<uint64_t, uint64_t>, uint64_t, IdPairHash> closure_by_request;
    // The same for per-worker resources.
    std::map<std::pair<uint64_t, uint64_t>, uint64_t> resource_by_request;
    // How many closures of each coordinator are not done (Done/Join in
    // O(log n)). Counts, not ids: every closure would enter and leave a set,
    // and only a first error walks them (the coordinator's closures, above).
    std::map<uint64_t, size_t> unfinished_by_coordinator;
    // How many closures are in each state (indexed by ClosureState). Only
    // assigned closures are ever walked in production, and those are
    // closures_by_worker's; the other states are walked by tests and tools.
    std::array<size_t, kClosureStateCount> closures_in_state{};
    // Queued and assigned closures with a deadline: (deadline, id).
    std::set<std::pair<int64_t, uint64_t>> closure_deadlines;
    // Input closure -> its dependants (Closure::inputs) that are not done: an
    // input stays (not released) while it has any.
    std::map<uint64_t, std::set<uint64_t>> needed_by;

    bool operator==(const Indexes&) const = default;
  };

  // One Check and one Apply per variant, in the file of their concern.
  // Apply* may assume its Check passed.
  Status CheckRegisterDataset(journal::RegisterDataset::Reader u) const;
  void ApplyRegisterDataset(journal::RegisterDataset::Reader u, int64_t now);
  Status CheckSetElementSpec(journal::SetElementSpec::Reader u) const;
  void ApplySetElementSpec(journal::SetElementSpec::Reader u);

  Status CheckRegisterWorker(journal::RegisterWorker::Reader u) const;
  void ApplyRegisterWorker(journal::RegisterWorker::Reader u, int64_t now);
  Status CheckRemoveWorker(journal::RemoveWorker::Reader u) const;
  void ApplyRemoveWorker(journal::RemoveWorker::Reader u);

  Status CheckCreateJob(journal::CreateJob::Reader u) const;
  void ApplyCreateJob(journal::CreateJob::Reader u, int64_t now);
  Status CheckAcquireJobClient(journal::AcquireJobClient::Reader u) const;
  void ApplyAcquireJobClient(journal::AcquireJobClient::Reader u, int64_t now);
  Status CheckReleaseJobClient(journal::ReleaseJobClient::Reader u) const;
  void ApplyReleaseJobClient(journal::ReleaseJobClient::Reader u, int64_t now);
  Status CheckGarbageCollectJob(journal::GarbageCollectJob::Reader u) const;
  void ApplyGarbageCollectJob(journal::GarbageCollectJob::Reader u);

  Status CheckNewTask(uint64_t task_id, uint64_t job_id, std::string_view address) const;
  Status CheckCreateTask(journal::CreateTask::Reader u) const;
  void ApplyCreateTask(journal::CreateTask::Reader u);
  Status CheckCreatePendingTask(journal::CreatePendingTask::Reader u) const;
  void ApplyCreatePendingTask(journal::CreatePendingTask::Reader u);
  Status CheckClientHeartbeat(journal::ClientHeartbeat::Reader u) const;
  void ApplyClientHeartbeat(journal::ClientHeartbeat::Reader u);
  Status CheckRemoveTask(journal::RemoveTask::Reader u) const;
  void ApplyRemoveTask(journal::RemoveTask::Reader u);
  Status CheckFinishTask(journal::FinishTask::Reader u) const;
  void ApplyFinishTask(journal::FinishTask::Reader u);
  // Marks an unfinished task finished and drops it from its worker's list.
  void FinishTaskRecord(Task& task);
  // FinishTaskRecord, then the job is finished when this was its last
  // unfinished task.
  void FinishTaskAndMaybeJob(Task& task);
  Status CheckHandOverTask(journal::HandOverTask::Reader u) const;
  void ApplyHandOverTask(journal::HandOverTask::Reader u);

  Status CheckProduceSplit(journal::ProduceSplit::Reader u) const;
  void ApplyProduceSplit(journal::ProduceSplit::Reader u);
  // Returns the outstanding splits of the task's grants to their providers'
  // requeue lists when its job asks for it: those of the current repetition
  // only (RemoveWorker's meaning), or of any (`any_repetition`, HandOverTask's).
  void RequeueOutstandingSplits(const Task& task, bool any_repetition = false);
  // The task's outstanding splits count as consumed.
  void ConsumeOutstandingSplits(uint64_t task_id);

  // Items of closure batches (closures.cc).
  // The earlier items of a `scheduled` batch (inputs may name them): ids
  // increasing, with their coordinators.
  struct ScheduledSoFar {
    std::vector<uint64_t> ids;
    std::vector<uint64_t> coordinators;
  };
  Status CheckClosureScheduled(journal::ClosureScheduled::Reader u,
                               const ScheduledSoFar& batch) const;
  void ApplyClosureScheduled(journal::ClosureScheduled::Reader u, int64_t now);
  Status CheckClosureAssigned(journal::ClosureAssigned::Reader u) const;
  void ApplyClosureAssigned(journal::ClosureAssigned::Reader u);
  Status CheckClosureFinished(journal::ClosureFinished::Reader u) const;
  void ApplyClosureFinished(journal::ClosureFinished::Reader u, int64_t now);
  // Ok when the closure exists and is queued or assigned (not done yet).
  Status CheckNotDone(uint64_t closure_id) const;
  // Cancels the closure without moving its dependants on (the caller does,
  // once every item of its batch is cancelled).
  void MarkCancelled(uint64_t closure_id, int64_t now);
  // Ok when the closure exists and is finished, failed or cancelled.
  Status CheckDone(uint64_t closure_id) const;
  Status CheckClosureFailed(journal::ClosureFailed::Reader u) const;
  void ApplyClosureFailed(journal::ClosureFailed::Reader u, int64_t now);
  Status CheckClosurePutBack(journal::ClosurePutBack::Reader u) const;
  void ApplyClosurePutBack(journal::ClosurePutBack::Reader u);
  Status CheckCoordinatorErrorCleared(journal::CoordinatorErrorCleared::Reader u) const;
  Status CheckResourceCreated(journal::ResourceCreated::Reader u) const;
  void ApplyResourceCreated(journal::ResourceCreated::Reader u);
  Status CheckClosureBatch(journal::ClosureBatch::Reader u) const;
  void ApplyClosureBatch(journal::ClosureBatch::Reader u, int64_t now);
  void ApplyCoordinatorErrorCleared(journal::CoordinatorErrorCleared::Reader u);
  // Ok when the closure exists and is assigned to `worker_id` as `attempt`.
  Status CheckAssignedTo(uint64_t closure_id, uint64_t worker_id, uint32_t attempt) const;
  // Moves a closure between states, keeping the state, worker and queue
  // indexes in step. The one place a closure changes state after its
  // schedule, so the one place its runs, ends and queueing are recorded.
  void SetClosureState(Closure& closure, ClosureState state);
  // Records in effects_ what moving `closure` to `state` does (before it moves).
  void RecordTransition(const Closure& closure, ClosureState state);
  // Puts the closure at the back of the queue / takes it out (both queue indexes).
  void Enqueue(Closure& closure);
  void Dequeue(Closure& closure);
  void ReleaseClosure(uint64_t closure_id);
  // After `closure_id` became done: its waiting dependants move on (queued
  // when all their inputs are finished, failed when this one is not), and
  // so on transitively (ClosureScheduled.inputs in the journal schema).
  void ResolveDependants(uint64_t closure_id, int64_t now);

  // Rebuilds `indexes_` from the records.
  void RebuildIndexes();
  Indexes ComputeIndexes() const;
  // Cross references between records hold (used by FromSnapshot).
  Status CheckReferences() const;

  uint64_t next_dataset_id_ = 1;
  uint64_t next_worker_id_ = 1;
  uint64_t next_job_id_ = 1;
  uint64_t next_task_id_ = 1;
  uint64_t next_job_client_id_ = 1;
  uint64_t next_closure_id_ = 1;
  uint64_t next_resource_id_ = 1;
  uint64_t next_queue_position_ = 1;
  int64_t last_time_micros_ = 0;
  uint64_t num_applied_ = 0;

  std::map<uint64_t, Dataset> datasets_;
  std::map<uint64_t, Worker> workers_;
  std::map<uint64_t, Job> jobs_;
  std::map<uint64_t, Task> tasks_;
  std::map<uint64_t, JobClient> job_clients_;
  std::map<SplitRequester, SplitGrant> split_grants_;
  // Hashed, not ordered: finding a closure by id is on every path a closure
  // takes (a tree of 100,000 was a tenth of the dispatcher's CPU in the
  // closures bench). What needs id order (the digest, snapshots) sorts:
  // ClosuresInIdOrder(). It grows its bucket array when it reaches a new
  // peak (a rehash of every node, once per doubling) and never shrinks it.
  std::unordered_map<uint64_t, Closure> closures_;
  std::map<uint64_t, CoordinatorError> coordinator_errors_;
  std::map<uint64_t, PerWorkerResource> resources_;

  Indexes indexes_;

  // The effects of the update Apply is applying; null outside Apply and when
  // its caller wants none (so a copy of the state never holds one).
  Effects* effects_ = nullptr;
  // What SetClosureState cannot see from the closure: how the update ending
  // it ended it. Set around that one call by the appliers that know (a
  // finish, a failure), default otherwise (dependants, cancels, put backs).
  struct Transition {
    bool reported = false;  // the update names the run's worker
    bool infrastructure = false;
    bool deadline_exceeded = false;
  };
  Transition transition_;
};

}  // namespace dispatch::state
