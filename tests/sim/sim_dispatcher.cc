// SimDispatcher: durability (Submit, the commit, the crash and the replay)
// and closure coordination (closure_dispatcher.cc, coordinator_session.cc).
// The data service's handlers are in sim_data_service.cc.

#include "tests/sim/sim_dispatcher.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <algorithm>
#include <utility>

#include "common/checksum.h"
#include "state/closure_endings.h"
#include "state/closure_requests.h"
#include "state/codec.h"
#include "state/push_planner.h"
#include "state/result_picker.h"
#include "state/schedule_call_planner.h"
#include "state/worker_planner.h"

namespace dispatch::sim {
namespace {

capnp::Text::Reader TextOf(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }
capnp::Data::Reader DataOf(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(s.data()), s.size());
}

}  // namespace

SimDispatcher::SimDispatcher(SimContext& ctx) : ctx_(ctx), journal_(ctx), clock_(ctx.net) {
  StartPipeline(state::DispatcherState());
  ctx_.control_connection = ctx_.net.Open();
  ctx_.on_broken = [this](uint64_t conn) { OnBroken(conn); };
}

// ---- Durability -------------------------------------------------------------

void SimDispatcher::StartPipeline(state::DispatcherState recovered) {
  pipeline_ = std::make_unique<reactor::CommitPipeline>(
      journal_, clock_, reactor::CommitPipelineOptions{}, std::move(recovered));
  // As ClosureDispatcher::Observe: the sessions hear of every closure that
  // ended, by its own item or with an input.
  pipeline_->AddAppliedObserver([this](const state::Effects& effects) {
    for (const state::ClosureEnded& ended : effects.ended)
      NotifyDone(ended.coordinator_id, ended.closure_id);
  });
  pipeline_->SetFatalHandler(
      [this](const Status& status) { ctx_.observer->Fail("fail-stop: " + status.ToString()); });
  reactor::CommitPipelineTesting testing;
  testing.reply_before_commit = ctx_.bug == SimBug::kReplyBeforeCommit;
  testing.unjournaled_release = ctx_.bug == SimBug::kUnjournaledRelease;
  pipeline_->SetTesting(testing);
}

int64_t SimDispatcher::NowMicros() const { return pipeline_->NowMicros(); }

state::ClosurePolicy SimDispatcher::Policy() const {
  state::ClosurePolicy policy = ctx_.params.policy;
  if (ctx_.bug == SimBug::kRetryForever) policy.max_closure_attempts = 0;
  if (ctx_.bug == SimBug::kForgetRefusals) policy.planted_bug = state::PlantedBug::kForgetRefusals;
  if (ctx_.bug == SimBug::kPushNoInputs) policy.planted_bug = state::PlantedBug::kPushNoInputs;
  if (ctx_.bug == SimBug::kForgetOutcome) policy.planted_bug = state::PlantedBug::kForgetOutcome;
  return policy;
}

state::Stamp SimDispatcher::Stamp() const {
  return state::Stamp{NowMicros(), pipeline_->max_record_bytes()};
}

Status SimDispatcher::Submit(journal::Update::Reader update) {
  Status submitted = pipeline_->Submit(update);
  // Every update here was planned or validated first, and the planners cut
  // what they build to fit a record: a refusal is a bug.
  if (!submitted.ok()) ctx_.observer->Fail("a planned update was refused: " + submitted.ToString());
  return submitted;
}

Status SimDispatcher::Carry(const state::UpdateList& updates) {
  for (size_t i = 0; i < updates.size(); ++i) DISPATCH_RETURN_IF_ERROR(Submit(updates[i]));
  return Status::Ok();
}

Status SimDispatcher::SubmitBuilt(const std::function<void(journal::Update::Builder)>& fill) {
  capnp::MallocMessageBuilder message;
  auto update = message.initRoot<journal::Update>();
  update.setTimeMicros(NowMicros());
  fill(update);
  return Submit(update.asReader());
}

void SimDispatcher::Park(uint64_t conn, std::function<void()> deliver) {
  // As a handler's reply waits on the pipeline's Barrier.
  pipeline_->WhenDurable([this, conn, deliver = std::move(deliver)]() mutable {
    ctx_.Reply(conn, std::move(deliver));
  });
}

void SimDispatcher::CheckCommitted() {
  if (!pipeline_->pending() && journal_.committed().Digest() != state().Digest())
    ctx_.observer->Fail("the live state and its journal differ after a commit");
}

void SimDispatcher::EndPass() {
  RunTimers();
  if (ctx_.Chance(0.5)) FlushReleases();  // the release timer
  AssignQueued();
  pipeline_->CommitPass();
  CheckCommitted();
  Status indexes = state().CheckIndexes();
  if (!indexes.ok()) ctx_.observer->Fail("indexes: " + indexes.ToString());
}

void SimDispatcher::Crash(bool commit_first) {
  if (commit_first) {
    pipeline_->CommitNow();
    CheckCommitted();
  }
  // The process dies: its batch, and every reply and push parked on it,
  // with the pipeline.
  pipeline_.reset();
  refused_ = state::RefusedSchedules();
  ctx_.net.CloseAll();  // every connection was to this process
  ++incarnation_;
  Recover();
}

void SimDispatcher::CheckReplay() { journal_.CheckReplay(); }

void SimDispatcher::Recover() {
  CheckReplay();
  StartPipeline(journal_.committed());
  soft_ = state::SoftState();
  controls_.clear();
  live_.clear();
  sessions_.clear();
  pending_releases_.clear();
  workers_attached_ = 0;
  ctx_.control_connection = ctx_.net.Open();
  ctx_.observer->Restarted(state());
  // DataService::Start: closures that were running go back to the queue;
  // registered workers and job clients count as heard from now.
  Carry(state::PlanRecovery(state(), Stamp())).ok();
  soft_.Initialize(state(), NowMs(), NowMicros());
}

// ---- Workers and their closures ---------------------------------------------

void SimDispatcher::OnBroken(uint64_t conn) {
  sessions_.erase(conn);
  for (const std::string& address : soft_.workers.Detach(conn))
    RemoveWorkerAt(address, "its connection dropped").ok();
}

Status SimDispatcher::RemoveWorkerAt(const std::string& address, const std::string& reason) {
  soft_.workers.Forget(address);
  controls_.erase(address);
  const state::Worker* worker = state().FindWorkerByAddress(address);
  if (worker == nullptr) return Status::Ok();
  const uint64_t worker_id = worker->id;
  live_.erase(worker_id);
  state::WorkerRemovalPlan plan =
      state::PlanWorkerRemoval(state(), Policy(), worker_id, reason, NowMs(), Stamp());
  DISPATCH_RETURN_IF_ERROR(Carry(plan.updates));
  soft_.Apply(plan.soft);
  return Status::Ok();
}

const SimDispatcher::Control* SimDispatcher::ControlAt(const std::string& address) const {
  auto it = controls_.find(address);
  return it == controls_.end() || !it->second ? nullptr : &it->second;
}

std::vector<state::LiveWorker> SimDispatcher::LiveWorkers() const {
  static const auto kEverything = std::make_shared<const state::FunctionSet>(
      state::FunctionSet{"f0", "f1", "f2", "f3", "f4", "f5"});
  std::vector<state::LiveWorker> workers;
  for (const auto& [worker_id, live] : live_) {
    const uint64_t conn = soft_.workers.ConnectionOf(live.address);
    if (conn == 0 || !ctx_.net.IsOpen(conn)) continue;
    workers.push_back(live.worker);
    if (ctx_.bug == SimBug::kIgnoreFunctions) workers.back().functions = kEverything;
  }
  return workers;
}

void SimDispatcher::AssignQueued() {
  if (state().NumClosuresInState(state::ClosureState::QUEUED) == 0 || live_.empty()) return;
  const std::vector<state::LiveWorker> workers = LiveWorkers();
  state::AssignmentPlan plan = state::PlanAssignments(
      state(), workers, static_cast<uint64_t>(ctx_.net.now_ms()), turn_++, Stamp());
  ctx_.observer->PassPlanned(state(), workers, plan.runs);
  if (!Carry(plan.updates).ok()) return;
  std::map<uint64_t, std::vector<uint64_t>> per_worker;
  for (const state::ClosureRun& run : plan.runs) {
    ctx_.observer->Assigned(state(), run);
    per_worker[run.worker_id].push_back(run.closure_id);
  }
  for (auto& [worker_id, ids] : per_worker) {
    if (ctx_.params.commit_hold) {
      PushAssigned(worker_id, ids);  // before the commit, as commit_hold_us does
    } else {
      // After the assignment commits, as a reply waits for it.
      pipeline_->WhenDurable(
          [this, worker_id = worker_id, ids = std::move(ids)] { PushAssigned(worker_id, ids); });
    }
  }
}

void SimDispatcher::PushAssigned(uint64_t worker_id, const std::vector<uint64_t>& closure_ids) {
  // As ClosureDispatcher::Push: the plan says which input results go with each.
  Result<std::vector<state::PushedClosure>> plan =
      state::PlanPush(state(), worker_id, closure_ids, state::kMaxPushBytes, Policy());
  if (!plan.ok()) {
    ctx_.observer->Fail(plan.status().message());
    return;
  }
  std::vector<RunPush> runs;
  for (const state::PushedClosure& pushed : *plan) {
    if (!pushed.refused.ok()) {
      Carry(state::PlanUserError(state(), pushed.run, pushed.refused.ToString(), Stamp())).ok();
      continue;
    }
    const state::Closure& closure = *pushed.closure;
    RunPush push{pushed.run.closure_id, worker_id, pushed.run.attempt, closure.function_name,
                 closure.args};
    for (uint64_t input : pushed.inputs)
      push.inputs.push_back(OutcomeOf(*state().FindClosure(input)).result);
    runs.push_back(std::move(push));
  }
  if (!runs.empty()) Push(worker_id, std::move(runs));
}

void SimDispatcher::Push(uint64_t worker_id, std::vector<RunPush> runs) {
  auto live = live_.find(worker_id);
  const Control* found = live == live_.end() ? nullptr : ControlAt(live->second.address);
  if (found == nullptr) {
    PushFailed(worker_id, runs);
    return;
  }
  Control control = *found;
  const uint64_t incarnation = incarnation_;
  ctx_.Send(
      soft_.workers.ConnectionOf(live->second.address), [control, runs] { control(runs); }, false,
      [this, incarnation, worker_id, runs] {
        if (incarnation == incarnation_) PushFailed(worker_id, runs);
      });
}

void SimDispatcher::PushFailed(uint64_t worker_id, const std::vector<RunPush>& runs) {
  for (const RunPush& run : runs) {
    if (state().FindRunning(run.closure_id, worker_id, run.attempt) == nullptr) continue;
    Carry(state::PlanRunEnded(state(), Policy(), {run.closure_id, worker_id, run.attempt},
                              state::RunEnd::kWorkerLost, "the push to its worker failed", Stamp()))
        .ok();
  }
}

void SimDispatcher::Reports(uint64_t conn, uint64_t worker_id,
                            const std::vector<ClosureReport>& reports) {
  (void)conn;
  const state::ClosurePolicy policy = Policy();
  std::set<uint64_t> seen;
  std::vector<state::StoredResult> results;
  std::vector<std::string> bytes;
  for (const ClosureReport& report : reports) {
    const state::ClosureRun run{report.closure_id, worker_id, report.attempt};
    if (state().FindRunning(run.closure_id, run.worker_id, run.attempt) == nullptr ||
        !seen.insert(run.closure_id).second) {
      continue;  // late, repeated, or of a registration that lost it
    }
    switch (report.kind) {
      case ClosureReport::Kind::kResult:
        results.push_back({run, report.payload.size(), Crc32c(report.payload)});
        bytes.push_back(report.payload);
        break;
      case ClosureReport::Kind::kUserError:
        Carry(state::PlanUserError(state(), run, report.payload, Stamp())).ok();
        break;
      case ClosureReport::Kind::kTransientError:
        Carry(state::PlanRunEnded(state(), policy, run, state::RunEnd::kTransientError,
                                  report.payload, Stamp()))
            .ok();
        break;
      case ClosureReport::Kind::kUnavailable: {
        auto live = live_.find(worker_id);
        if (live != live_.end()) live->second.worker.paused = true;
        Carry(state::PlanRunEnded(state(), policy, run, state::RunEnd::kWorkerLost,
                                  "its worker is unavailable: " + report.payload, Stamp()))
            .ok();
        break;
      }
    }
  }
  if (results.empty()) return;
  FlushReleases();
  state::UpdateList finished;
  state::AddFinished(finished, Stamp(), results);
  size_t next = 0;
  for (size_t i = 0; i < finished.size(); ++i) {
    if (!Submit(finished[i]).ok()) return;
    for (size_t n = finished[i].getClosureBatch().getFinished().size(); n > 0; --n, ++next) {
      if (!bytes[next].empty())
        pipeline_->batch().PutResult(results[next].run.closure_id, bytes[next]);
    }
  }
}

// ---- Coordinators ------------------------------------------------------------

SimDispatcher::Session& SimDispatcher::SessionOf(uint64_t conn, uint64_t coordinator_id) {
  auto [it, inserted] = sessions_.try_emplace(conn);
  if (inserted) {
    // A new session reports every outcome not released yet, in id order.
    it->second.coordinator_id = coordinator_id;
    for (uint64_t id : state::OwedOutcomes(state(), pending_releases_, coordinator_id))
      it->second.undelivered.push_back(id);
  }
  return it->second;
}

void SimDispatcher::NotifyDone(uint64_t coordinator_id, uint64_t closure_id) {
  for (auto& [conn, session] : sessions_)
    if (session.coordinator_id == coordinator_id) session.undelivered.push_back(closure_id);
}

void SimDispatcher::Schedule(uint64_t conn, uint64_t coordinator_id,
                             const std::vector<ClosureSpec>& specs,
                             std::function<void(const ScheduleReply&)> reply) {
  SessionOf(conn, coordinator_id);
  // As ClosureDispatcher::ScheduleCall, with room at once (the simulation
  // bounds no queue).
  state::ScheduleCallRequest request;
  request.coordinator_id = coordinator_id;
  for (const ClosureSpec& spec : specs) request.request_ids.push_back(spec.request_id);
  request.closures = [&specs] {
    std::vector<state::NewClosure> closures;
    for (const ClosureSpec& spec : specs) {
      closures.push_back({0,
                          TextOf(spec.function),
                          DataOf(spec.args),
                          {},
                          spec.request_id,
                          spec.priority,
                          spec.timeout_ms});
      closures.back().inputs = spec.inputs;
    }
    return closures;
  };
  Result<state::ScheduleCallPlan> plan = state::PlanScheduleCall(
      state(), refused_, pending_releases_, request, Stamp(), Policy());
  ScheduleReply out;
  if (!plan.ok()) {
    out.status = plan.status();
  } else {
    if (plan->num_new > 0) FlushReleases();
    out.status = Carry(plan->updates);
  }
  if (out.status.ok()) {
    if (plan->record_refusal) refused_.Record(coordinator_id, request.request_ids, plan->refusal);
    out.raised_error = plan->refused && plan->refusal.closure_id != 0;
    out.error_closure = plan->refusal.closure_id;
    out.ids = std::move(plan->ids);
  }
  Park(conn, [reply, out] { reply(out); });
}

Outcome SimDispatcher::OutcomeOf(const state::Closure& closure) const {
  Outcome outcome;
  outcome.closure_id = closure.id;
  outcome.state = closure.state;
  if (closure.state == state::ClosureState::FAILED) outcome.error = closure.error;
  if (closure.state != state::ClosureState::FINISHED) return outcome;
  if (!closure.result_stored) {
    outcome.result = closure.result;
  } else if (closure.result_size > 0) {
    // This pass's puts first, then the table (DurableState::GetResult).
    const std::string* found = nullptr;
    for (const ResultPut& put : pipeline_->batch().result_puts())
      if (put.closure_id == closure.id) found = &put.bytes;
    if (found == nullptr) found = journal_.FindResult(closure.id);
    if (found != nullptr) {
      outcome.result = *found;
    } else {
      ctx_.observer->Fail("closure " + std::to_string(closure.id) + " has no stored result");
    }
  }
  if (outcome.result.size() != closure.result_size ||
      (closure.result_stored && Crc32c(outcome.result) != closure.result_crc))
    ctx_.observer->Fail("closure " + std::to_string(closure.id) + ": stored result is damaged");
  return outcome;
}

void SimDispatcher::AwaitResults(uint64_t conn, uint64_t coordinator_id,
                                 const std::vector<uint64_t>& release,
                                 std::function<void(const std::vector<Outcome>&)> reply) {
  Session& session = SessionOf(conn, coordinator_id);
  Result<std::vector<uint64_t>> released =
      state::PlanRelease(state(), coordinator_id, release, pending_releases_);
  if (!released.ok()) {
    ctx_.observer->Fail("a release was refused: " + released.status().ToString());
    return;
  }
  pending_releases_.Insert(released->begin(), released->end());
  if (pending_releases_.size() >= 16) FlushReleases();
  // As CoordinatorSession::PickResults, with the dispatcher's default limits.
  const uint32_t max = static_cast<uint32_t>(ctx_.Uniform(1, 8));
  state::ResultPick pick =
      state::PickResults(state(), pending_releases_, session.undelivered, max, {}, Policy());
  session.undelivered.erase(session.undelivered.begin(), session.undelivered.begin() + pick.taken);
  std::vector<Outcome> outcomes;
  for (uint64_t id : pick.ids) outcomes.push_back(OutcomeOf(*state().FindClosure(id)));
  // As coordinator_session.cc: the releases are journaled before the reply
  // that acknowledges them leaves.
  if (!release.empty()) FlushReleases();
  Park(conn, [reply, outcomes] { reply(outcomes); });
}

void SimDispatcher::Join(uint64_t conn, uint64_t coordinator_id,
                         std::function<void(const JoinReply&)> reply) {
  SessionOf(conn, coordinator_id);
  JoinReply out;
  std::optional<state::TakenFirstError> taken =
      state::PlanTakeFirstError(state(), coordinator_id, Stamp());
  out.raised_error = taken && Carry(taken->updates).ok();
  out.unfinished = state().NumUnfinishedClosures(coordinator_id);
  Park(conn, [reply, out] { reply(out); });
}

void SimDispatcher::FlushReleases() {
  state::ReleaseFlushPlan plan = state::PlanReleaseFlush(state(), pending_releases_, Stamp());
  pending_releases_.clear();
  pending_releases_.Insert(plan.held.begin(), plan.held.end());
  if (plan.updates.empty()) return;
  Carry(plan.updates).ok();
  for (uint64_t id : plan.stored) pipeline_->batch().DeleteResult(id);
}

void SimDispatcher::TellWorkersToDrop(const std::map<uint64_t, std::vector<uint64_t>>& running) {
  for (const auto& [worker_id, closure_ids] : running) {
    std::vector<RunPush> drops;
    for (uint64_t id : closure_ids) {
      RunPush drop;
      drop.closure_id = id;
      drop.worker_id = worker_id;
      drop.cancel = true;
      drops.push_back(std::move(drop));
    }
    auto live = live_.find(worker_id);
    const Control* found = live == live_.end() ? nullptr : ControlAt(live->second.address);
    if (found == nullptr) continue;  // best effort
    Control control = *found;
    ctx_.Send(
        soft_.workers.ConnectionOf(live->second.address), [control, drops] { control(drops); },
        false);
  }
}

void SimDispatcher::Cancel(uint64_t conn, uint64_t coordinator_id,
                           const std::vector<uint64_t>& closure_ids,
                           std::function<void(const CancelReply&)> reply) {
  SessionOf(conn, coordinator_id);
  CancelReply out;
  // As ClosureDispatcher::Cancel.
  Result<state::CancelPlan> plan =
      state::PlanCancel(state(), coordinator_id, closure_ids, pending_releases_, Stamp());
  if (!plan.ok()) {
    out.status = plan.status();
  } else {
    ctx_.observer->CancelAsked(closure_ids);
    out.status = Carry(plan->ending.updates);
    out.states = plan->states;
    TellWorkersToDrop(plan->ending.running);
  }
  Park(conn, [reply, out] { reply(out); });
}

}  // namespace dispatch::sim
