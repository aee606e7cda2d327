#include "tests/state/update_generator.h"

#include <capnp/schema.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "state/data_policy.h"
#include "state/task_routing.h"

namespace dispatch::state::testing {

namespace {

using Which = journal::Update::Which;

constexpr int kNumAddresses = 8;
constexpr uint64_t kNumCoordinators = 4;
// Caps that keep the live state (and the cost of each Next) bounded in long
// runs; finished jobs and tasks still accumulate, as they do in a dispatcher.
constexpr size_t kMaxDatasets = 256;
constexpr size_t kMaxUnfinishedJobs = 40;
constexpr size_t kMaxClients = 64;
constexpr size_t kMaxClosuresPerState = 256;

// Closure batches: many-item ones (8) and batches of one, as a single
// closure's schedule (10), assignment (8), finish (5), cancel (1) and release
// (6) are journaled.
constexpr uint64_t kManyItemWeight = 8;
constexpr uint64_t kOneItemWeights[] = {10, 8, 5, 1, 6};
constexpr uint64_t kClosureBatchWeight = kManyItemWeight + 10 + 8 + 5 + 1 + 6;

// Relative frequency of each variant; the rest of the generator only decides
// whether the state allows one right now. Every variant is named (no default):
// a new one does not compile until it has a weight here and a case in TryBuild.
uint64_t Weight(Which kind) {
  switch (kind) {
    case Which::INVALID:
      return 0;  // never valid
    case Which::REGISTER_DATASET:
      return 3;
    case Which::SET_ELEMENT_SPEC:
      return 2;
    case Which::REGISTER_WORKER:
      return 4;
    case Which::REMOVE_WORKER:
      return 2;
    case Which::CREATE_JOB:
      return 5;
    case Which::PRODUCE_SPLIT:
      return 14;
    case Which::ACQUIRE_JOB_CLIENT:
      return 5;
    case Which::RELEASE_JOB_CLIENT:
      return 4;
    case Which::GARBAGE_COLLECT_JOB:
      return 2;
    case Which::CREATE_TASK:
      return 8;
    case Which::CREATE_PENDING_TASK:
      return 4;
    case Which::CLIENT_HEARTBEAT:
      return 6;
    case Which::REMOVE_TASK:
      return 2;
    case Which::FINISH_TASK:
      return 5;
    case Which::RETIRED_CLOSURE_SCHEDULED:
    case Which::RETIRED_CLOSURE_ASSIGNED:
    case Which::RETIRED_CLOSURE_FINISHED:
    case Which::RETIRED_CLOSURE_CANCELLED:
    case Which::RETIRED_CLOSURE_RELEASED:
      return 0;  // Void: no transition (a single closure travels in a batch of one)
    case Which::CLOSURE_FAILED:
      return 2;
    case Which::CLOSURE_PUT_BACK:
      return 2;
    case Which::COORDINATOR_ERROR_CLEARED:
      return 2;
    case Which::RESOURCE_CREATED:
      return 1;
    case Which::CLOSURE_BATCH:
      return kClosureBatchWeight;
    case Which::HAND_OVER_TASK:
      return 2;
  }
  return 0;
}

// (variant, weight) in schema order.
const std::vector<std::pair<Which, uint64_t>>& Weights() {
  static const auto* weights = [] {
    auto* out = new std::vector<std::pair<Which, uint64_t>>;
    for (Which kind : AllTransitionVariants()) out->emplace_back(kind, Weight(kind));
    return out;
  }();
  return *weights;
}

std::string Address(uint64_t i) { return "worker-" + std::to_string(i) + ":7000"; }

}  // namespace

UpdateGenerator::UpdateGenerator(uint64_t seed) : rng_(seed) {}

uint64_t UpdateGenerator::Uniform(uint64_t n) { return rng_() % n; }

OwnedUpdate UpdateGenerator::Next(const DispatcherState& state) {
  uint64_t total = 0;
  for (const auto& [kind, weight] : Weights()) total += weight;
  OwnedUpdate out;
  bool built = false;
  for (int attempt = 0; attempt < 200 && !built; ++attempt) {
    uint64_t ticket = Uniform(total);
    Which kind = Weights().front().first;
    for (const auto& [k, weight] : Weights()) {
      if (ticket < weight) {
        kind = k;
        break;
      }
      ticket -= weight;
    }
    out = OwnedUpdate();
    built = TryBuild(kind, state, out);
  }
  if (!built) {
    out = OwnedUpdate();
    fallback_ = true;
    TryBuild(Which::REGISTER_DATASET, state, out);  // always possible
    fallback_ = false;
  }
  now_micros_ += static_cast<int64_t>(Uniform(5000));
  out.builder().setTimeMicros(now_micros_);
  counts_[out.reader().which()] += 1;
  return out;
}

bool UpdateGenerator::TryBuild(Which kind, const DispatcherState& state, OwnedUpdate& out) {
  switch (kind) {
    case Which::INVALID:
      return false;
    case Which::REGISTER_DATASET:
    case Which::SET_ELEMENT_SPEC:
    case Which::REGISTER_WORKER:
    case Which::REMOVE_WORKER:
    case Which::CREATE_JOB:
    case Which::PRODUCE_SPLIT:
    case Which::ACQUIRE_JOB_CLIENT:
    case Which::RELEASE_JOB_CLIENT:
    case Which::GARBAGE_COLLECT_JOB:
    case Which::CREATE_TASK:
    case Which::CREATE_PENDING_TASK:
    case Which::CLIENT_HEARTBEAT:
    case Which::REMOVE_TASK:
    case Which::FINISH_TASK:
    case Which::HAND_OVER_TASK:
      return TryDataService(kind, state, out);
    case Which::RETIRED_CLOSURE_SCHEDULED:
    case Which::RETIRED_CLOSURE_ASSIGNED:
    case Which::RETIRED_CLOSURE_FINISHED:
    case Which::RETIRED_CLOSURE_CANCELLED:
    case Which::RETIRED_CLOSURE_RELEASED:
      return false;
    case Which::CLOSURE_FAILED:
    case Which::CLOSURE_PUT_BACK:
    case Which::COORDINATOR_ERROR_CLEARED:
    case Which::RESOURCE_CREATED:
      return TryClosures(kind, state, out);
    case Which::CLOSURE_BATCH:
      return TryClosureBatch(state, out);
  }
  return false;
}

bool UpdateGenerator::TryDataService(Which kind, const DispatcherState& state, OwnedUpdate& out) {
  auto bytes = [this](uint64_t max_len) {
    std::string s(Uniform(max_len + 1), '\0');
    for (char& c : s) c = static_cast<char>(Uniform(256));
    return s;
  };
  switch (kind) {
    case Which::REGISTER_DATASET: {
      if (!fallback_ && state.ListDatasets().size() >= kMaxDatasets) return false;
      const uint64_t id = state.NextDatasetId() + (OneIn(5) ? Uniform(3) : 0);
      uint64_t fingerprint = rng_();
      while (state.FindDatasetByFingerprint(fingerprint) != nullptr) fingerprint = rng_();
      // Some datasets have a kind (tasks go only to workers producing it).
      const char* kKinds[] = {"", "", "range", "python"};
      // A loaded snapshot may hold any key for any id (the snapshot fuzz
      // target's do): never reuse one.
      std::set<std::string> keys;
      for (const Dataset* d : state.ListDatasets()) keys.insert(d->definition_key);
      std::string key = "ds-" + std::to_string(id);
      while (keys.contains(key)) key = "ds-" + std::to_string(id) + "-" + std::to_string(rng_());
      out = RegisterDataset(id, fingerprint, key, bytes(16), kKinds[Uniform(4)]);
      return true;
    }
    case Which::SET_ELEMENT_SPEC: {
      std::vector<uint64_t> ids;
      for (const Dataset* d : state.ListDatasets()) {
        if (!d->element_spec.has_value()) ids.push_back(d->id);
      }
      if (ids.empty()) return false;
      out = SetElementSpec(Pick(ids), "spec" + bytes(8));
      return true;
    }
    case Which::REGISTER_WORKER: {
      std::vector<std::string> free;
      for (uint64_t i = 0; i < kNumAddresses; ++i) {
        if (state.FindWorkerByAddress(Address(i)) == nullptr) free.push_back(Address(i));
      }
      if (free.empty()) return false;
      const std::string address = Pick(free);
      std::vector<std::string> tags;
      if (OneIn(2)) tags.push_back("gpu");
      if (OneIn(3)) tags.push_back("rack-" + std::to_string(Uniform(3)));
      // Most workers announce nothing (served every job); some announce kinds.
      std::vector<std::string> kinds;
      if (OneIn(3)) kinds.push_back(OneIn(2) ? "range" : "python");
      if (!kinds.empty() && OneIn(3)) kinds.push_back("lines");
      out = RegisterWorker(state.NextWorkerId(), address, "xfer-" + address, tags, rng_(), kinds);
      return true;
    }
    case Which::REMOVE_WORKER: {
      std::vector<uint64_t> ids;
      for (const Worker* w : state.ListWorkers()) {
        if (state.ClosuresOnWorker(w->id).empty()) ids.push_back(w->id);
      }
      if (ids.empty()) return false;
      out = RemoveWorker(Pick(ids));
      return true;
    }
    case Which::CREATE_JOB: {
      if (state.ListUnfinishedJobs().size() >= kMaxUnfinishedJobs) return false;
      std::vector<const Dataset*> datasets = state.ListDatasets();
      if (datasets.empty()) return false;
      JobOptions options;
      options.mode = static_cast<ProcessingMode>(Uniform(6));
      if (options.mode == ProcessingMode::DYNAMIC) {
        options.num_split_providers = 1 + static_cast<uint32_t>(Uniform(3));
        options.requeue_unfinished_splits = OneIn(2);
      }
      if (OneIn(4)) options.num_consumers = 1 + static_cast<uint32_t>(Uniform(3));
      options.target_workers = static_cast<TargetWorkers>(Uniform(3));
      if (OneIn(3)) {
        NamedJobKey key{OneIn(2) ? "alpha" : "beta", static_cast<int64_t>(Uniform(2))};
        const Job* holder = state.FindNamedJob(key);
        if (holder == nullptr || holder->garbage_collected) options.name = key;
      }
      out = CreateJob(state.NextJobId() + (OneIn(5) ? Uniform(3) : 0), Pick(datasets)->id, options);
      return true;
    }
    case Which::PRODUCE_SPLIT: {
      std::vector<std::pair<const Job*, const Task*>> candidates;
      for (const Job* job : state.ListUnfinishedJobs()) {
        if (!job->IsDynamic() || job->finished) continue;
        for (const Task* task : state.TasksForJob(job->id)) {
          if (!task->finished) candidates.emplace_back(job, task);
        }
      }
      if (candidates.empty()) return false;
      const auto [job, task] = Pick(candidates);
      const uint32_t provider = static_cast<uint32_t>(Uniform(job->providers.size()));
      const SplitProviderProgress& progress = job->providers[provider];
      const SplitGrant* grant = state.FindSplitGrant(task->id, provider);
      const uint64_t sequence =
          (grant == nullptr ? 0 : grant->sequence) + 1 + (OneIn(5) ? Uniform(3) : 0);
      const bool end = OneIn(8);
      uint64_t count = Uniform(4);
      if (end && count < progress.requeued.size()) count = progress.requeued.size();
      if (!end && count == 0) count = 1;
      std::vector<uint64_t> indices;
      uint64_t fresh = progress.next_index;
      for (uint64_t i = 0; i < count; ++i) {
        indices.push_back(i < progress.requeued.size() ? progress.requeued[i] : fresh++);
      }
      out = ProduceSplit(job->id, progress.repetition, provider, task->id, sequence, indices, end);
      return true;
    }
    case Which::ACQUIRE_JOB_CLIENT: {
      if (state.ListJobClients().size() >= kMaxClients) return false;
      std::vector<uint64_t> ids;
      // Now and then a finished (not yet collected) job: it may take clients too.
      for (const Job* job : OneIn(10) ? state.ListJobs() : state.ListUnfinishedJobs()) {
        if (!job->garbage_collected) ids.push_back(job->id);
      }
      if (ids.empty()) return false;
      out = AcquireJobClient(state.NextJobClientId(), Pick(ids));
      return true;
    }
    case Which::RELEASE_JOB_CLIENT: {
      std::vector<const JobClient*> clients = state.ListJobClients();
      if (clients.empty()) return false;
      out = ReleaseJobClient(Pick(clients)->id);
      return true;
    }
    case Which::GARBAGE_COLLECT_JOB: {
      std::vector<uint64_t> ids;
      for (const Job* job : state.ListUnfinishedJobs()) {
        if (!job->finished && job->num_clients == 0 && job->last_client_released_micros >= 0)
          ids.push_back(job->id);
      }
      if (ids.empty()) return false;
      out = GarbageCollectJob(Pick(ids));
      return true;
    }
    case Which::CREATE_TASK:
    case Which::CREATE_PENDING_TASK: {
      const bool pending = kind == Which::CREATE_PENDING_TASK;
      std::vector<std::pair<uint64_t, std::string>> pairs;
      for (const Job* job : state.ListUnfinishedJobs()) {
        if (job->finished || (pending && !job->IsRoundRobin())) continue;
        for (const std::string& address : WorkersNeedingTask(state, job->id)) {
          pairs.emplace_back(job->id, address);
        }
      }
      if (pairs.empty()) return false;
      const auto& [job_id, address] = Pick(pairs);
      out = pending ? CreatePendingTask(state.NextTaskId(), job_id, address,
                                        static_cast<int64_t>(Uniform(10)))
                    : CreateTask(state.NextTaskId(), job_id, address);
      return true;
    }
    case Which::CLIENT_HEARTBEAT: {
      std::vector<std::pair<const JobClient*, const PendingTask*>> candidates;
      for (const JobClient* client : state.ListJobClients()) {
        std::vector<const PendingTask*> pending = state.PendingTasks(client->job_id);
        if (!pending.empty()) candidates.emplace_back(client, pending.front());
      }
      if (candidates.empty()) return false;
      const auto [client, front] = Pick(candidates);
      if (!front->ready_clients.contains(client->id) && !OneIn(4)) {
        out = AcceptPendingTask(client->id, front->task_id);
      } else {
        out = RejectPendingTask(client->id, front->task_id,
                                front->target_round + 1 + static_cast<int64_t>(Uniform(4)));
      }
      return true;
    }
    case Which::REMOVE_TASK:
    case Which::FINISH_TASK: {
      const bool remove = kind == Which::REMOVE_TASK;
      std::vector<uint64_t> ids;
      for (const Job* job : state.ListUnfinishedJobs()) {
        if (remove && !job->IsRoundRobin()) continue;
        for (const Task* task : state.TasksForJob(job->id)) {
          if (remove || !task->finished) ids.push_back(task->id);
        }
      }
      if (ids.empty()) return false;
      out = remove ? RemoveTask(Pick(ids)) : FinishTask(Pick(ids));
      return true;
    }
    case Which::HAND_OVER_TASK: {
      // Unfinished tasks of DYNAMIC and OFF jobs whose address has no worker.
      std::vector<uint64_t> ids;
      for (const Job* job : state.ListUnfinishedJobs()) {
        if (!HandsOverTasks(*job)) continue;
        for (const Task* task : state.TasksForJob(job->id)) {
          if (!task->finished && state.FindWorkerByAddress(task->worker_address) == nullptr)
            ids.push_back(task->id);
        }
      }
      if (ids.empty()) return false;
      out = HandOverTask(Pick(ids));
      return true;
    }
    default:
      break;
  }
  ADD_FAILURE() << "TryBuild routes " << VariantName(kind)
                << " to TryDataService, which has no case";
  return false;
}

bool UpdateGenerator::TryClosureBatch(const DispatcherState& state, OwnedUpdate& out) {
  uint64_t ticket = Uniform(kClosureBatchWeight);
  if (ticket < kManyItemWeight) return TryManyItemBatch(state, out);
  ticket -= kManyItemWeight;
  for (int item = 0;; ++item) {
    if (ticket < kOneItemWeights[item]) return TryOneItemBatch(item, state, out);
    ticket -= kOneItemWeights[item];
  }
}

bool UpdateGenerator::TryManyItemBatch(const DispatcherState& state, OwnedUpdate& out) {
  static const unsigned kNumKinds =
      capnp::Schema::from<journal::ClosureBatch>().getUnionFields().size();
  const size_t max_items = 1 + Uniform(4);
  // Discriminants number a union's members 0, 1, ... in schema order.
  switch (static_cast<journal::ClosureBatch::Which>(Uniform(kNumKinds))) {
    case journal::ClosureBatch::SCHEDULED: {
      if (state.NumClosuresInState(ClosureState::QUEUED) >= kMaxClosuresPerState) return false;
      std::vector<uint64_t> ids;
      std::vector<uint64_t> request_ids;
      const uint64_t coordinator = 1 + Uniform(kNumCoordinators);
      uint64_t id = state.NextClosureId();
      for (size_t i = 0; i < max_items; ++i) {
        ids.push_back(id);
        id += 1 + (OneIn(5) ? Uniform(3) : 0);
        while (state.FindClosureByRequest(coordinator, next_request_id_) != nullptr)
          ++next_request_id_;
        request_ids.push_back(next_request_id_++);
      }
      // Sometimes a dependency on an earlier item of the same batch.
      std::vector<std::vector<uint64_t>> inputs;
      if (ids.size() > 1 && OneIn(3)) {
        inputs.resize(ids.size());
        inputs.back().push_back(ids[Uniform(ids.size() - 1)]);
      }
      out = ScheduleClosures(ids, coordinator, request_ids, inputs);
      return true;
    }
    case journal::ClosureBatch::ASSIGNED: {
      std::vector<const Worker*> workers = state.ListWorkers();
      std::vector<const Closure*> queued = state.ClosuresInState(ClosureState::QUEUED);
      if (queued.empty() || workers.empty()) return false;
      std::vector<ClosureRef> refs;
      for (size_t i = 0; i < queued.size() && i < max_items; ++i)
        refs.push_back({queued[i]->id, Pick(workers)->id, queued[i]->attempts + 1});
      out = AssignClosures(refs);
      return true;
    }
    case journal::ClosureBatch::FINISHED: {
      std::vector<const Closure*> assigned = state.ClosuresInState(ClosureState::ASSIGNED);
      if (assigned.empty()) return false;
      std::vector<ClosureRef> refs;
      for (size_t i = 0; i < assigned.size() && i < max_items; ++i)
        refs.push_back({assigned[i]->id, assigned[i]->worker_id, assigned[i]->attempts});
      out = FinishClosures(refs);
      return true;
    }
    case journal::ClosureBatch::CANCELLED: {
      std::vector<uint64_t> ids;
      for (ClosureState s : {ClosureState::QUEUED, ClosureState::WAITING}) {
        for (const Closure* c : state.ClosuresInState(s)) {
          if (ids.size() < max_items) ids.push_back(c->id);
        }
      }
      if (ids.empty()) return false;
      out = CancelClosures(ids);
      return true;
    }
    case journal::ClosureBatch::RELEASED: {
      std::vector<uint64_t> ids;
      for (ClosureState s :
           {ClosureState::FINISHED, ClosureState::FAILED, ClosureState::CANCELLED}) {
        for (const Closure* c : state.ClosuresInState(s)) {
          // An input of a closure not done stays until that one is.
          if (ids.size() < max_items && !state.IsNeededAsInput(c->id)) ids.push_back(c->id);
        }
      }
      if (ids.empty()) return false;
      out = ReleaseClosures(ids);
      return true;
    }
  }
  return false;
}

bool UpdateGenerator::TryClosures(Which kind, const DispatcherState& state, OwnedUpdate& out) {
  switch (kind) {
    case Which::RESOURCE_CREATED: {
      if (state.resources().size() >= 16) return false;
      // Valid updates only: a request id this coordinator has used becomes none.
      const uint64_t coordinator = 1 + Uniform(kNumCoordinators);
      uint64_t request_id = OneIn(2) ? 0 : 1 + Uniform(8);
      if (state.FindResourceByRequest(coordinator, request_id) != nullptr) request_id = 0;
      out = CreateResource(state.NextResourceId() + (OneIn(5) ? Uniform(3) : 0), coordinator,
                           OneIn(2) ? "make" : "open", std::to_string(rng_()), request_id);
      return true;
    }
    case Which::CLOSURE_PUT_BACK: {
      std::vector<const Closure*> assigned = state.ClosuresInState(ClosureState::ASSIGNED);
      if (assigned.empty()) return false;
      const Closure* c = Pick(assigned);
      out = PutBackClosure(c->id, c->worker_id, c->attempts, OneIn(2));
      return true;
    }
    case Which::CLOSURE_FAILED: {
      std::vector<const Closure*> live = state.ClosuresInState(ClosureState::ASSIGNED);
      const bool by_dispatcher = OneIn(3);
      if (by_dispatcher) {
        for (const Closure* c : state.ClosuresInState(ClosureState::QUEUED)) live.push_back(c);
      }
      if (live.empty()) return false;
      const Closure* c = Pick(live);
      if (by_dispatcher && c->deadline_micros != 0 && OneIn(2)) {
        out = FailClosure(c->id, 0, 0, "closure " + std::to_string(c->id) + ": deadline exceeded",
                          false, false, /*deadline_exceeded=*/true);
      } else if (by_dispatcher) {
        out = FailClosure(c->id, 0, 0, "too many attempts for closure " + std::to_string(c->id),
                          false);
      } else {
        const bool user_error = OneIn(2);
        out = FailClosure(c->id, c->worker_id, c->attempts, "error-" + std::to_string(rng_()),
                          user_error, !user_error && OneIn(2));
      }
      return true;
    }
    case Which::COORDINATOR_ERROR_CLEARED: {
      std::vector<uint64_t> ids;
      for (uint64_t id = 1; id <= kNumCoordinators; ++id) {
        if (state.FindCoordinatorError(id) != nullptr) ids.push_back(id);
      }
      if (ids.empty()) return false;
      out = ClearCoordinatorError(Pick(ids));
      return true;
    }
    default:
      break;
  }
  ADD_FAILURE() << "TryBuild routes " << VariantName(kind) << " to TryClosures, which has no case";
  return false;
}

bool UpdateGenerator::TryOneItemBatch(int item, const DispatcherState& state, OwnedUpdate& out) {
  switch (item) {
    case 0: {  // schedule
      if (state.NumClosuresInState(ClosureState::QUEUED) >= kMaxClosuresPerState ||
          state.NumClosuresInState(ClosureState::FINISHED) +
                  state.NumClosuresInState(ClosureState::FAILED) +
                  state.NumClosuresInState(ClosureState::CANCELLED) >=
              kMaxClosuresPerState) {
        return false;
      }
      static const std::vector<std::string> kFunctions = {"noop", "echo", "sleep", "fail"};
      std::string args(Uniform(33), '\0');
      for (char& c : args) c = static_cast<char>(Uniform(256));
      const uint64_t coordinator = 1 + Uniform(kNumCoordinators);
      uint64_t request_id = 0;
      if (OneIn(2)) {
        while (state.FindClosureByRequest(coordinator, next_request_id_) != nullptr)
          ++next_request_id_;
        request_id = next_request_id_++;
      }
      std::vector<uint64_t> resources;
      if (!state.resources().empty() && OneIn(4)) {
        auto it = state.resources().begin();
        std::advance(it, Uniform(state.resources().size()));
        resources.push_back(it->first);
      }
      // Priorities among a few values (so ties and FIFO within one show up);
      // deadlines on some.
      const int32_t priority = OneIn(2) ? 0 : static_cast<int32_t>(Uniform(5)) - 2;
      const int64_t deadline = OneIn(3) ? now_micros_ + 1 + static_cast<int64_t>(Uniform(1000000)) : 0;
      // Dependencies: up to two of the coordinator's closures, whatever
      // their state (waiting, running, finished, failed: each path).
      std::vector<uint64_t> inputs;
      std::vector<const Closure*> mine = state.ClosuresForCoordinator(coordinator);
      if (!mine.empty() && OneIn(3)) {
        inputs.push_back(Pick(mine)->id);
        if (OneIn(3)) inputs.push_back(Pick(mine)->id);
      }
      out = ScheduleClosure(state.NextClosureId() + (OneIn(5) ? Uniform(3) : 0), coordinator,
                            Pick(kFunctions), args, request_id, resources, priority, deadline,
                            inputs);
      return true;
    }
    case 1: {  // assign
      std::vector<const Closure*> queued = state.ClosuresInState(ClosureState::QUEUED);
      std::vector<const Worker*> workers = state.ListWorkers();
      if (queued.empty() || workers.empty()) return false;
      const Closure* closure = OneIn(3) ? Pick(queued) : queued.front();
      out = AssignClosure(closure->id, Pick(workers)->id, closure->attempts + 1);
      return true;
    }
    case 2: {  // finish
      std::vector<const Closure*> assigned = state.ClosuresInState(ClosureState::ASSIGNED);
      if (assigned.empty()) return false;
      const Closure* c = Pick(assigned);
      out = OneIn(2) ? FinishClosure(c->id, c->worker_id, c->attempts,
                                     "result-" + std::to_string(rng_()))
                     : FinishClosureStored(c->id, c->worker_id, c->attempts, rng_() % (1u << 20),
                                           static_cast<uint32_t>(rng_()));
      return true;
    }
    case 3: {  // cancel, queued or running
      std::vector<const Closure*> live = state.ClosuresInState(ClosureState::ASSIGNED);
      for (const Closure* c : state.ClosuresInState(ClosureState::QUEUED)) live.push_back(c);
      for (const Closure* c : state.ClosuresInState(ClosureState::WAITING)) live.push_back(c);
      if (live.empty()) return false;
      out = CancelClosure(Pick(live)->id);
      return true;
    }
    default: {  // release
      std::vector<const Closure*> done;
      for (ClosureState s :
           {ClosureState::FINISHED, ClosureState::FAILED, ClosureState::CANCELLED}) {
        for (const Closure* c : state.ClosuresInState(s)) {
          if (!state.IsNeededAsInput(c->id)) done.push_back(c);
        }
      }
      if (done.empty()) return false;
      out = ReleaseClosure(Pick(done)->id);
      return true;
    }
  }
}

}  // namespace dispatch::state::testing
