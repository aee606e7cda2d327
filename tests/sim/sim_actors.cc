#include "tests/sim/sim_actors.h"

#include <algorithm>
#include <utility>

#include "common/closure_limits.h"

namespace dispatch::sim {
namespace {

std::string FunctionName(int64_t k) { return "f" + std::to_string(k); }

}  // namespace

// ---- Worker -------------------------------------------------------------------

SimWorker::SimWorker(SimContext& ctx, SimDispatcher& dispatcher, int index)
    : ctx_(ctx), dispatcher_(dispatcher), name_("w" + std::to_string(index)), address_(name_) {
  revive_at_ = ctx_.Uniform(0, 50);
  addresses_.insert(address_);
}

bool SimWorker::HadAddress(const std::string& address) const {
  return addresses_.contains(address);
}

std::shared_ptr<const state::FunctionSet> SimWorker::FunctionsOf(uint64_t incarnation) const {
  auto it = functions_.find(incarnation);
  return it == functions_.end() ? nullptr : it->second;
}

void SimWorker::Start(bool all_functions) {
  alive_ = true;
  incarnation_ = ctx_.rng() | 1;  // never 0
  auto functions = std::make_shared<state::FunctionSet>();
  for (int k = 0; k < ctx_.params.num_functions; ++k)
    if (all_functions || ctx_.Chance(0.6)) functions->insert(FunctionName(k));
  if (functions->empty())
    functions->insert(FunctionName(ctx_.Uniform(0, ctx_.params.num_functions - 1)));
  functions_[incarnation_] = std::move(functions);
  slots_ = static_cast<uint32_t>(ctx_.Uniform(1, 3));
  // As dispatch-worker does: a process that takes over an address continues
  // its tasks' split streams above the dead process's sequence numbers.
  first_sequence_ = static_cast<uint64_t>(ctx_.net.now_ms()) * 1000 + 1;
  conn_ = ctx_.net.Open();
  next_heartbeat_ = ctx_.net.now_ms();
}

void SimWorker::Die() {
  alive_ = false;
  ctx_.Break(conn_);
  conn_ = 0;
  runs_.clear();
  tasks_.clear();
  revive_at_ = ctx_.net.now_ms() + (healed_ ? 0 : ctx_.Uniform(30, 400));
  // Gone for good: what comes back is a new worker at a fresh address (a pod
  // rescheduled elsewhere), and nothing ever heartbeats at the old one again.
  if (ctx_.Chance(ctx_.params.new_address)) {
    address_ = name_ + "." + std::to_string(++moves_);
    addresses_.insert(address_);
  }
}

void SimWorker::Heal() {
  healed_ = true;
  const auto& all = ctx_.params.num_functions;
  if (alive_ && FunctionsOf(incarnation_)->size() != static_cast<size_t>(all)) Die();
  if (!alive_) revive_at_ = ctx_.net.now_ms();
}

void SimWorker::Step() {
  const int64_t now = ctx_.net.now_ms();
  if (!alive_) {
    if (now >= revive_at_) Start(healed_);
    return;
  }
  if (!healed_ && ctx_.Chance(ctx_.params.worker_death)) {
    Die();
    return;
  }
  if (!ctx_.net.IsOpen(conn_)) {
    // The connection broke: a new one, and every call on the old is gone.
    conn_ = ctx_.net.Open();
    next_heartbeat_ = now;
    for (auto& [id, task] : tasks_) task.waiting = false;
  }
  if (now >= next_heartbeat_) Heartbeat();
  ReportDone();
  WorkTasks();
}

void SimWorker::Heartbeat() {
  HeartbeatRequest request;
  request.address = address_;
  request.incarnation = incarnation_;
  request.slots = slots_;
  request.functions = functions_[incarnation_];
  std::vector<uint64_t> done;
  for (const auto& [id, task] : tasks_) {
    request.current_tasks.push_back(id);
    if (task.done) done.push_back(id);
  }
  const uint64_t conn = conn_, incarnation = incarnation_;
  request.control = [this, conn, incarnation](const std::vector<RunPush>& runs) {
    if (alive_ && incarnation_ == incarnation && conn_ == conn) OnPush(conn, runs);
  };
  auto reply = [this, conn, incarnation](const HeartbeatReply& r) {
    if (!alive_ || incarnation_ != incarnation || conn_ != conn) return;
    for (const TaskInfo& info : r.new_tasks) {
      if (tasks_.contains(info.task_id)) continue;
      TaskRun task;
      task.info = info;
      task.next_sequence = first_sequence_;
      task.next_at = ctx_.net.now_ms() + (info.dynamic ? 0 : ctx_.Uniform(20, 200));
      tasks_.emplace(info.task_id, task);
    }
    for (uint64_t id : r.tasks_to_delete) tasks_.erase(id);
  };
  SimDispatcher* d = &dispatcher_;
  ctx_.Send(
      conn_, [d, conn, request, reply] { d->WorkerHeartbeat(conn, request, reply); }, true);
  // A finished task is reported until the dispatcher says to delete it.
  if (!done.empty())
    ctx_.Send(
        conn_, [d, conn, done] { d->WorkerUpdate(conn, done); }, true);
  next_heartbeat_ = ctx_.net.now_ms() + ctx_.Uniform(40, 100);
}

void SimWorker::OnPush(uint64_t conn, const std::vector<RunPush>& runs) {
  (void)conn;
  const auto& functions = *functions_[incarnation_];
  for (const RunPush& push : runs) {
    if (push.cancel) {
      runs_.erase(push.closure_id);  // not started, or its result will be ignored
      continue;
    }
    if (!functions.contains(push.function)) {
      ctx_.observer->Fail("worker " + address_ + " was pushed closure " +
                          std::to_string(push.closure_id) + " of function " + push.function +
                          ", which it did not register");
      continue;
    }
    auto it = runs_.find(push.closure_id);
    if (it != runs_.end() && it->second.attempt == push.attempt &&
        it->second.worker_id == push.worker_id)
      continue;  // pushed again
    runs_[push.closure_id] = Run{push.worker_id, push.attempt,
                                 ctx_.net.now_ms() + ctx_.Uniform(1, 40), push.args, push.inputs,
                                 conn};
  }
}

void SimWorker::ReportDone() {
  std::map<uint64_t, std::vector<ClosureReport>> by_registration;
  for (auto it = runs_.begin(); it != runs_.end();) {
    const Run& run = it->second;
    if (run.done_at > ctx_.net.now_ms()) {
      ++it;
      continue;
    }
    if (run.conn != conn_) {
      // As ClosureRunner does: the dispatcher put it back when that
      // connection ended.
      it = runs_.erase(it);
      continue;
    }
    ClosureReport report;
    report.closure_id = it->first;
    report.attempt = run.attempt;
    const char mode = run.args.back();
    if (mode == 'u') {
      report.kind = ClosureReport::Kind::kUserError;
      report.payload = "user error of " + run.args;
    } else if (mode == 't' && ctx_.Chance(0.6)) {
      report.kind = ClosureReport::Kind::kTransientError;
      report.payload = "flaky";
    } else if (ctx_.Chance(0.03)) {
      report.kind = ClosureReport::Kind::kUnavailable;
      report.payload = "busy";
    } else {
      report.payload = ClosureResult(run.args, run.inputs);
    }
    by_registration[run.worker_id].push_back(std::move(report));
    it = runs_.erase(it);
  }
  SimDispatcher* d = &dispatcher_;
  const uint64_t conn = conn_;
  for (auto& [worker_id, reports] : by_registration) {
    ctx_.Send(
        conn_,
        [d, conn, worker_id = worker_id, reports = std::move(reports)] {
          d->Reports(conn, worker_id, reports);
        },
        true);
  }
}

void SimWorker::WorkTasks() {
  SimDispatcher* d = &dispatcher_;
  const uint64_t conn = conn_;
  for (auto& [id, task] : tasks_) {
    if (task.done || task.waiting || ctx_.net.now_ms() < task.next_at) continue;
    if (task.info.dynamic) {
      AskSplit(id, task);
    } else {
      task.done = true;  // read the whole dataset
      ctx_.Send(
          conn_, [d, conn, id = id] { d->WorkerUpdate(conn, {id}); }, true);
    }
  }
}

void SimWorker::AskSplit(uint64_t task_id, TaskRun& task) {
  SplitRequest request{task_id, task.next_sequence, task.repetition,
                       static_cast<uint32_t>(ctx_.Uniform(1, 3))};
  task.waiting = true;
  SimDispatcher* d = &dispatcher_;
  const uint64_t conn = conn_;
  auto reply = [this, conn, task_id, sequence = request.sequence,
                job_id = task.info.job_id](const SplitReply& r) {
    if (r.status.ok()) ctx_.observer->SplitAnswered(job_id, task_id, sequence, r);
    OnSplit(conn, task_id, sequence, r);
  };
  ctx_.Send(
      conn_, [d, conn, request, reply] { d->GetSplit(conn, request, reply); }, true);
}

void SimWorker::OnSplit(uint64_t conn, uint64_t task_id, uint64_t sequence,
                        const SplitReply& reply) {
  if (!alive_ || conn != conn_) return;
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  TaskRun& task = it->second;
  if (!task.waiting || task.next_sequence != sequence) return;  // an answer to a copy
  task.waiting = false;
  const int64_t now = ctx_.net.now_ms();
  if (!reply.status.ok()) {
    task.next_at = now + 20;
    // Another repetition is still being handed out: ask again later.
    if (reply.status.message().find("at repetition") == std::string::npos) task.done = true;
    return;
  }
  ++task.next_sequence;
  task.next_at = now + ctx_.Uniform(0, 10);
  // None now: another task holds splits that may come back; ask again later
  // (clients/split_fetcher.cc waits 50 ms).
  if (reply.indices.empty() && !reply.end_of_splits) task.next_at = now + 50;
  if (!reply.end_of_splits) return;
  if (++task.repetition < task.info.repetitions) return;
  task.done = true;
  SimDispatcher* d = &dispatcher_;
  ctx_.Send(
      conn_, [d, conn, task_id] { d->WorkerUpdate(conn, {task_id}); }, true);
}

// ---- Coordinator ----------------------------------------------------------------

SimCoordinator::SimCoordinator(SimContext& ctx, SimDispatcher& dispatcher, uint64_t coordinator_id)
    : ctx_(ctx), dispatcher_(dispatcher), id_(coordinator_id) {}

bool SimCoordinator::Settled() const {
  return healed_ && unacknowledged_.empty() && to_release_.empty() && !awaiting_;
}

std::string SimCoordinator::Describe() const {
  std::string out = "coordinator " + std::to_string(id_) + ": " +
                    std::to_string(unacknowledged_.size()) + " unacknowledged, " +
                    std::to_string(to_release_.size()) + " to release, " +
                    (awaiting_ ? "awaiting results" : "idle") + ", outcomes of unknown closures:";
  std::set<uint64_t> known;
  for (const auto& [request_id, closure_id] : acknowledged_) known.insert(closure_id);
  for (const auto& [id, outcome] : outcomes_)
    if (!known.contains(id)) out += " " + std::to_string(id);
  return out;
}

void SimCoordinator::Connect() {
  conn_ = ctx_.net.Open();
  awaiting_ = false;
  // Calls that had no reply go again on the new connection, as one call.
  // Their specs keep their order (request ids), but not their positions: an
  // in-call input is renumbered to where the spec it names stands in this
  // call (a call is acknowledged or refused whole, so it is in it).
  if (!unacknowledged_.empty()) {
    std::vector<ClosureSpec> specs;
    std::map<uint64_t, uint64_t> position;  // request id -> index in this call
    for (const auto& [request_id, spec] : unacknowledged_) {
      position[request_id] = specs.size();
      specs.push_back(spec);
    }
    for (ClosureSpec& spec : specs) {
      for (uint64_t& input : spec.inputs) {
        if (input < kInputInCall) continue;
        auto named = position.find(spec.call_first_request + (input - kInputInCall));
        if (named != position.end()) input = kInputInCall + named->second;
      }
    }
    SendSchedule(std::move(specs));
  }
}

void SimCoordinator::SendSchedule(std::vector<ClosureSpec> specs) {
  for (const ClosureSpec& spec : specs) sent_at_[spec.request_id] = ctx_.net.now_ms();
  SimDispatcher* d = &dispatcher_;
  const uint64_t conn = conn_, id = id_;
  auto reply = [this, specs](const ScheduleReply& r) { OnScheduled(specs, r); };
  ctx_.Send(
      conn_, [d, conn, id, specs, reply] { d->Schedule(conn, id, specs, reply); }, true);
}

void SimCoordinator::OnScheduled(const std::vector<ClosureSpec>& specs, const ScheduleReply& r) {
  if (r.raised_error) {
    // The first error came instead: the call scheduled nothing.
    for (const ClosureSpec& spec : specs) {
      if (unacknowledged_.contains(spec.request_id)) Unpin(spec);
      unacknowledged_.erase(spec.request_id);
    }
    return;
  }
  if (!r.status.ok()) {
    ctx_.observer->Fail("coordinator " + std::to_string(id_) +
                        ": schedule refused: " + r.status.ToString());
    return;
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t request_id = specs[i].request_id;
    auto [it, inserted] = acknowledged_.emplace(request_id, r.ids[i]);
    if (!inserted && it->second != r.ids[i]) {
      ctx_.observer->Fail("coordinator " + std::to_string(id_) + " request " +
                          std::to_string(request_id) + " scheduled closure " +
                          std::to_string(it->second) + " and then closure " +
                          std::to_string(r.ids[i]));
    }
    for (uint64_t input : specs[i].inputs)
      if (input >= kInputInCall) used_as_input_.insert(r.ids[input - kInputInCall]);
    if (unacknowledged_.contains(request_id)) Unpin(specs[i]);
    unacknowledged_.erase(request_id);
    if (outcomes_.contains(r.ids[i])) to_release_.insert(r.ids[i]);
  }
}

void SimCoordinator::OnOutcomes(uint64_t conn, const std::vector<Outcome>& outcomes,
                                const std::vector<uint64_t>& released) {
  std::set<uint64_t> known;
  for (const auto& [request_id, closure_id] : acknowledged_) known.insert(closure_id);
  // This reply acknowledges the releases its call carried.
  release_acknowledged_.insert(released.begin(), released.end());
  for (const Outcome& outcome : outcomes) {
    // An input released while a dependant was not done is held in memory
    // only (the awaitResults comment's exception): a restart may report it again.
    if (release_acknowledged_.contains(outcome.closure_id) &&
        !used_as_input_.contains(outcome.closure_id)) {
      ctx_.observer->Fail("coordinator " + std::to_string(id_) + ": closure " +
                          std::to_string(outcome.closure_id) +
                          " was reported again after its release was acknowledged");
    }
    ctx_.observer->OutcomeDelivered(id_, outcome);
    outcomes_[outcome.closure_id] = outcome;
    // Released once the coordinator knows whose it is (its schedule's reply).
    if (known.contains(outcome.closure_id)) to_release_.insert(outcome.closure_id);
  }
  if (conn != conn_) return;
  awaiting_ = false;
  next_poll_ = ctx_.net.now_ms() + ctx_.Uniform(5, 30);
}

void SimCoordinator::Step() {
  const int64_t now = ctx_.net.now_ms();
  if (!ctx_.net.IsOpen(conn_)) Connect();
  if (!healed_ && scheduled_ < ctx_.params.max_closures && ctx_.Chance(0.15)) {
    std::vector<ClosureSpec> specs;
    for (int64_t n = ctx_.Uniform(1, 3); n > 0; --n) {
      ClosureSpec spec = NewSpec(specs);
      spec.call_first_request = specs.empty() ? spec.request_id : specs.front().request_id;
      unacknowledged_[spec.request_id] = spec;
      for (uint64_t input : spec.inputs) {
        if (input < kInputInCall) pinned_inputs_.insert(input);
        if (input < kInputInCall) used_as_input_.insert(input);
      }
      specs.push_back(std::move(spec));
      ++scheduled_;
    }
    SendSchedule(std::move(specs));
  }
  if (!healed_ && ctx_.Chance(0.02)) MaybeCancel();
  SimDispatcher* d = &dispatcher_;
  const uint64_t conn = conn_, id = id_;
  if (!awaiting_ && now >= next_poll_) {
    std::vector<uint64_t> release;
    for (auto it = to_release_.begin(); it != to_release_.end();) {
      if (pinned_inputs_.contains(*it)) {
        ++it;
        continue;
      }
      release.push_back(*it);
      // A lost call breaks the connection: the next session reports them again.
      it = to_release_.erase(it);
    }
    awaiting_ = true;
    auto reply = [this, conn, release](const std::vector<Outcome>& outcomes) {
      OnOutcomes(conn, outcomes, release);
    };
    ctx_.Send(
        conn_, [d, conn, id, release, reply] { d->AwaitResults(conn, id, release, reply); }, true);
  }
  if (ctx_.Chance(0.02)) {
    ctx_.Send(
        conn_, [d, conn, id] { d->Join(conn, id, [](const JoinReply&) {}); }, true);
  }
}

ClosureSpec SimCoordinator::NewSpec(const std::vector<ClosureSpec>& earlier_in_call) {
  ClosureSpec spec;
  spec.request_id = next_request_id_++;
  spec.function = FunctionName(ctx_.Uniform(0, ctx_.params.num_functions - 1));
  const double kind = std::uniform_real_distribution<double>(0, 1)(ctx_.rng);
  const char mode = kind < 0.04 ? 'u' : kind < 0.25 ? 't' : 'o';
  spec.args = "c" + std::to_string(id_) + "-" + std::to_string(spec.request_id) + "-" + mode;
  if (ctx_.Chance(0.3)) spec.priority = static_cast<int32_t>(ctx_.Uniform(-2, 3));
  if (ctx_.Chance(0.1)) spec.timeout_ms = static_cast<uint32_t>(ctx_.Uniform(5, 60));
  if (ctx_.Chance(0.2)) {
    // Inputs: closures whose outcome has not come yet (so not released),
    // or an earlier closure of this call.
    std::vector<uint64_t> candidates;
    for (const auto& [request_id, closure_id] : acknowledged_)
      if (!outcomes_.contains(closure_id)) candidates.push_back(closure_id);
    for (size_t j = 0; j < earlier_in_call.size(); ++j) candidates.push_back(kInputInCall + j);
    for (int64_t n = ctx_.Uniform(1, 2); n > 0 && !candidates.empty(); --n) {
      const size_t pick = static_cast<size_t>(ctx_.Uniform(0, candidates.size() - 1));
      spec.inputs.push_back(candidates[pick]);
    }
  }
  return spec;
}

void SimCoordinator::Unpin(const ClosureSpec& spec) {
  for (uint64_t input : spec.inputs) {
    if (input >= kInputInCall) continue;
    auto it = pinned_inputs_.find(input);
    if (it != pinned_inputs_.end()) pinned_inputs_.erase(it);
  }
}

void SimCoordinator::MaybeCancel() {
  std::vector<uint64_t> candidates;
  for (const auto& [request_id, closure_id] : acknowledged_)
    if (!outcomes_.contains(closure_id)) candidates.push_back(closure_id);
  if (candidates.empty()) return;
  std::vector<uint64_t> ids;
  for (int64_t n = ctx_.Uniform(1, 3); n > 0; --n)
    ids.push_back(candidates[static_cast<size_t>(ctx_.Uniform(0, candidates.size() - 1))]);
  SimDispatcher* d = &dispatcher_;
  const uint64_t conn = conn_, id = id_;
  auto reply = [this, ids](const CancelReply& r) {
    // A copy that arrives after the coordinator released one is NotFound.
    if (r.status.code() == StatusCode::kNotFound) return;
    if (!r.status.ok()) {
      ctx_.observer->Fail("coordinator " + std::to_string(id_) +
                          ": cancel refused: " + r.status.ToString());
      return;
    }
    for (size_t i = 0; i < r.states.size(); ++i) {
      if (!state::IsClosureDone(r.states[i]))
        ctx_.observer->Fail("cancel left closure " + std::to_string(ids[i]) + " " +
                            state::ClosureStateName(r.states[i]));
    }
  };
  ctx_.Send(
      conn_, [d, conn, id, ids, reply] { d->Cancel(conn, id, ids, reply); }, true);
}

// ---- Consumer -------------------------------------------------------------------

SimConsumer::SimConsumer(SimContext& ctx, SimDispatcher& dispatcher, int index)
    : ctx_(ctx), dispatcher_(dispatcher), index_(index) {}

void SimConsumer::Step() {
  const int64_t now = ctx_.net.now_ms();
  if (!ctx_.net.IsOpen(conn_)) {
    conn_ = ctx_.net.Open();
    waiting_ = false;
  }
  // Reading: a round a step, up to where it was told to block.
  if (client_id_ != 0 && round_robin_ && now >= stalled_until_ && (block_ < 0 || round_ < block_))
    ++round_;
  if (waiting_) return;  // one call at a time
  SimDispatcher* d = &dispatcher_;
  const uint64_t conn = conn_;
  if (dataset_id_ == 0) {
    const uint64_t fingerprint = 100 + static_cast<uint64_t>(index_ % 2);
    const uint64_t splits = 3 + (fingerprint * 7) % 10;
    const int64_t reps = 1 + static_cast<int64_t>(fingerprint % 2);
    waiting_ = true;
    auto reply = [this, conn](uint64_t dataset_id) {
      if (conn != conn_) return;
      dataset_id_ = dataset_id;
      waiting_ = false;
    };
    ctx_.Send(
        conn_,
        [d, conn, fingerprint, splits, reps, reply] {
          d->RegisterDataset(conn, fingerprint, splits, reps, reply);
        },
        true);
    return;
  }
  if (client_id_ == 0) {
    if (healed_ || jobs_ >= 3 || now < next_at_) return;
    JobRequest request;
    request.dataset_id = dataset_id_;
    request.dynamic = ctx_.Chance(0.7);
    const bool requeue = ctx_.Chance(0.5);
    request.requeue = request.dynamic && requeue;
    if (ctx_.Chance(0.5)) {
      request.name = "job-" + std::to_string(dataset_id_) +
                     (request.dynamic ? "-dynamic" : "-off") +
                     (request.dynamic && request.requeue ? "-requeue" : "");
    }
    // Round robin with this consumer alone, from the draws above (a new draw
    // would move every later choice of the seed): an anonymous OFF job whose
    // requeue draw came up.
    if (!request.dynamic && requeue && request.name.empty()) request.num_consumers = 1;
    waiting_ = true;
    auto reply = [this, conn, round_robin = request.num_consumers > 0](const JobReply& r) {
      if (conn != conn_) return;
      waiting_ = false;
      if (!r.status.ok()) {
        next_at_ = ctx_.net.now_ms() + 50;
        return;
      }
      client_id_ = r.job_client_id;
      ++jobs_;
      release_at_ = ctx_.net.now_ms() + ctx_.Uniform(100, 600);
      round_robin_ = round_robin;
      round_ = 0;
      block_ = -1;
      answered_ = false;
      known_tasks_.clear();
    };
    ctx_.Send(
        conn_, [d, conn, request, reply] { d->GetOrCreateJob(conn, request, reply); }, true);
    return;
  }
  const uint64_t client_id = client_id_;
  if (healed_ || now >= release_at_) {
    waiting_ = true;
    auto reply = [this, conn](Status) {
      if (conn != conn_) return;
      waiting_ = false;
      client_id_ = 0;
      next_at_ = ctx_.net.now_ms() + ctx_.Uniform(20, 200);
    };
    ctx_.Send(
        conn_, [d, conn, client_id, reply] { d->ReleaseJobClient(conn, client_id, reply); }, true);
    return;
  }
  if (!healed_ && ctx_.Chance(0.005)) stalled_until_ = now + ctx_.Uniform(200, 800);
  if (now < stalled_until_ || !ctx_.Chance(0.3)) return;
  Heartbeat();
}

void SimConsumer::Heartbeat() {
  ClientHeartbeatRequest request;
  request.job_client_id = client_id_;
  if (round_robin_) {
    request.current_round = round_;
    if (block_ >= 0 && round_ == block_) request.blocked_round = block_;
  }
  waiting_ = true;
  const uint64_t beat = ++beats_;
  const uint64_t conn = conn_, client_id = client_id_;
  auto reply = [this, conn, beat, client_id](const ClientHeartbeatReply& r) {
    if (conn != conn_) return;
    waiting_ = false;
    if (!r.status.ok()) client_id_ = 0;  // released by its timeout, or its job collected
    // Only the answer to its latest call counts (a copy of an earlier call
    // may be answered late, as a client library matches answers to calls).
    if (r.status.ok() && beat == beats_ && client_id == client_id_ && round_robin_) OnRounds(r);
  };
  SimDispatcher* d = &dispatcher_;
  ctx_.Send(
      conn_, [d, conn, request, reply] { d->ClientHeartbeat(conn, request, reply); }, true);
}

void SimConsumer::OnRounds(const ClientHeartbeatReply& reply) {
  for (const auto& [task_id, starting_round] : reply.tasks) {
    if (!known_tasks_.insert(task_id).second) continue;
    // The tasks of its first answer were there when it joined, from round 0.
    if (answered_)
      ctx_.observer->RoundRobinTaskStarted(client_id_, task_id, starting_round, round_);
  }
  answered_ = true;
  block_ = reply.block_round;
}

}  // namespace dispatch::sim
