// SimDispatcher: the data service's handlers and timers, as
// reactor/worker_service.cc, split_service.cc, job_service.cc,
// dataset_service.cc and gc_timers.cc carry them: decode, the same planner
// (state/split_planner.h, worker_planner.h, job_planner.h,
// consumer_planner.h), carry its Updates and soft changes, reply. A
// dataset's metadata holds its split source here: "<splits> <repetitions>".

#include <algorithm>
#include <cstdio>
#include <string>

#include "state/closure_endings.h"
#include "state/consumer_planner.h"
#include "state/hand_over_planner.h"
#include "state/job_planner.h"
#include "state/split_planner.h"
#include "state/worker_planner.h"
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

state::DataPolicy SimDispatcher::DataPolicy() const {
  state::DataPolicy policy;
  policy.max_splits_per_call = ctx_.params.max_splits_per_call;
  policy.job_gc_timeout_ms = static_cast<uint64_t>(ctx_.params.job_gc_timeout_ms);
  policy.client_timeout_ms = static_cast<uint64_t>(ctx_.params.client_timeout_ms);
  policy.worker_grace_ms = static_cast<uint64_t>(
      std::min(ctx_.params.worker_grace_ms, ctx_.params.worker_timeout_ms));
  if (ctx_.bug == SimBug::kSplitRetryNotIdempotent)
    policy.planted_bug = state::PlantedBug::kSplitRetryNotIdempotent;
  if (ctx_.bug == SimBug::kRoundRobinIgnoresRounds)
    policy.planted_bug = state::PlantedBug::kRoundRobinIgnoresRounds;
  if (ctx_.bug == SimBug::kEndSplitsWhileHeld)
    policy.planted_bug = state::PlantedBug::kEndSplitsWhileHeld;
  return policy;
}

state::SplitSourceLookup SimDispatcher::SplitSources() const {
  return [this](uint64_t dataset_id) -> Result<state::SplitSourceSummary> {
    DISPATCH_RETURN_IF_ERROR(state().GetDataset(dataset_id).status());
    return state::SplitSourceSummary{true, SourceOf(state(), dataset_id).num_splits};
  };
}

TaskInfo SimDispatcher::InfoOf(const state::Task& task) const {
  const state::Job* job = state().FindJob(task.job_id);
  return TaskInfo{task.id, task.job_id, job->IsDynamic(),
                  SourceOf(state(), job->dataset_id).repetitions};
}

void SimDispatcher::WorkerHeartbeat(uint64_t conn, const HeartbeatRequest& request,
                                    std::function<void(const HeartbeatReply&)> reply) {
  const std::string& address = request.address;
  state::WorkerHeartbeatRequest decoded;
  decoded.address = address;
  decoded.transfer_address = address + ":transfer";
  decoded.incarnation = request.incarnation;
  decoded.current_tasks = request.current_tasks;
  decoded.connection = conn;
  state::WorkerHeartbeatPlan plan =
      state::PlanWorkerHeartbeat(state(), soft_, decoded, NowMs(), Stamp());
  if (plan.replaces_worker_id != 0) {
    if (!RemoveWorkerAt(address, "a new worker process took its address").ok()) return;
    plan = state::PlanWorkerHeartbeat(state(), soft_, decoded, NowMs(), Stamp());
  }
  if (!Carry(plan.updates).ok()) return;
  const bool attached = soft_.Apply(plan.soft);
  controls_.insert_or_assign(address, request.control);  // WorkerRegistry::Heartbeat
  const uint64_t worker_id = plan.worker_id;
  // ClosureDispatcher::OnWorkerHeartbeat.
  auto [live, new_live] = live_.try_emplace(worker_id);
  if (new_live || plan.registers || attached) {
    // A new link: the worker drops the outcomes of closures pushed on its
    // earlier connections, so those runs are lost (pinned seeds 27, 216, 226, 255).
    Carry(state::PlanWorkerLost(state(), Policy(), worker_id,
                                "it reconnected; its earlier connection's runs are dropped",
                                Stamp()))
        .ok();
    live->second.address = address;
    live->second.worker.worker_id = worker_id;
    live->second.worker.eligible_at_ms =
        static_cast<uint64_t>(ctx_.net.now_ms()) +
        state::StartDelayMs(ctx_.params.policy, workers_attached_++);
  }
  live->second.worker.functions = request.functions;
  live->second.worker.slots = request.slots;
  live->second.worker.paused = false;

  HeartbeatReply out;
  out.worker_id = worker_id;
  out.dispatcher_incarnation = incarnation_;
  for (uint64_t id : plan.tasks_to_start) out.new_tasks.push_back(InfoOf(*state().FindTask(id)));
  out.tasks_to_delete = plan.tasks_to_delete;
  Park(conn, [reply, out] { reply(out); });
}

void SimDispatcher::WorkerUpdate(uint64_t conn, const std::vector<uint64_t>& completed_tasks) {
  (void)conn;
  std::vector<state::TaskProgress> progress;
  for (uint64_t task_id : completed_tasks) progress.push_back({task_id, true});
  Result<state::UpdateList> updates = state::PlanWorkerUpdate(state(), progress, Stamp());
  if (updates.ok()) Carry(*updates).ok();  // refused (an unknown task): nothing changes
}

void SimDispatcher::GetSplit(uint64_t conn, const SplitRequest& request,
                             std::function<void(const SplitReply&)> reply) {
  state::GetSplitRequest decoded;
  decoded.task_id = request.task_id;
  decoded.sequence = request.sequence;
  decoded.repetition = request.repetition;
  decoded.max_splits = request.max_splits;
  Result<state::GetSplitPlan> plan =
      state::PlanGetSplit(state(), decoded, SplitSources(), Stamp(), DataPolicy());
  SplitReply out;
  if (!plan.ok()) {
    out.status = plan.status();
  } else {
    if (!Carry(plan->updates).ok()) return;
    out.repetition = plan->answer.repetition;
    out.end_of_splits = plan->answer.end_of_splits;
    out.indices = plan->answer.split_indices;
  }
  Park(conn, [reply, out] { reply(out); });
}

void SimDispatcher::RegisterDataset(uint64_t conn, uint64_t fingerprint, uint64_t num_splits,
                                    int64_t repetitions, std::function<void(uint64_t)> reply) {
  const state::Dataset* known = state().FindDatasetByFingerprint(fingerprint);
  uint64_t dataset_id = known != nullptr ? known->id : state().NextDatasetId();
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
  state::JobRequest decoded;
  decoded.dataset_id = request.dataset_id;
  decoded.job_name = request.name;
  decoded.processing_mode =
      request.dynamic ? rpc::ProcessingMode::DYNAMIC : rpc::ProcessingMode::OFF;
  decoded.num_consumers = request.num_consumers;
  decoded.requeue_unfinished_splits = request.requeue;
  Result<state::JobPlan> plan =
      state::PlanGetOrCreateJob(state(), decoded, SplitSources(), NowMs(), Stamp(), DataPolicy());
  JobReply out;
  if (!plan.ok()) {
    out.status = plan.status();
  } else {
    // The new tasks' workers learn of them from their heartbeats: simulated
    // workers get no task pushes.
    out.status = Carry(plan->updates);
    if (!out.status.ok()) return;
    soft_.Apply(plan->soft);
    out.job_id = plan->job_id;
    out.job_client_id = plan->job_client_id;
  }
  Park(conn, [reply, out] { reply(out); });
}

void SimDispatcher::ClientHeartbeat(uint64_t conn, const ClientHeartbeatRequest& request,
                                    std::function<void(const ClientHeartbeatReply&)> reply) {
  state::ClientHeartbeatRequest decoded{request.job_client_id, request.current_round,
                                        request.blocked_round};
  Result<state::ClientHeartbeatPlan> plan =
      state::PlanClientHeartbeat(state(), soft_, decoded, NowMs(), Stamp(), DataPolicy());
  ClientHeartbeatReply out;
  if (!plan.ok()) {
    out.status = plan.status();
  } else {
    if (!Carry(plan->updates).ok()) return;
    soft_.Apply(plan->soft);
    const state::ClientHeartbeatAnswer answer = state::AnswerClientHeartbeat(state(), plan->job_id);
    out.job_finished = answer.job_finished;
    out.block_round = answer.block_round;
    for (const state::Task* task : answer.tasks)
      out.tasks.emplace_back(task->id, task->starting_round);
  }
  Park(conn, [reply, out] { reply(out); });
}

void SimDispatcher::ReleaseJobClient(uint64_t conn, uint64_t client_id,
                                     std::function<void(Status)> reply) {
  Result<state::ReleasePlan> plan = state::PlanReleaseJobClient(state(), client_id, Stamp());
  Status status = plan.status();
  if (plan.ok()) {
    if (!Carry(plan->updates).ok()) return;
    soft_.Apply(plan->soft);
  }
  Park(conn, [reply, status] { reply(status); });
}

void SimDispatcher::RunTimers() {
  const state::DataPolicy policy = DataPolicy();
  // Liveness: workers past the timeout are removed, consumers released.
  for (const std::string& address :
       soft_.workers.TimedOut(NowMs(), static_cast<uint64_t>(ctx_.params.worker_timeout_ms)))
    RemoveWorkerAt(address, "no heartbeat within the worker timeout").ok();
  // Tasks of addresses without a worker for the grace period (gc_timers.cc;
  // with a grace of 0 the dispatcher carries this at the removal, which the
  // end of the same pass stands for here).
  state::TaskHandOverPlan handovers =
      state::PlanTaskHandOvers(state(), soft_, NowMs(), policy, Stamp());
  for (size_t i = 0; i < handovers.updates.size(); ++i) Submit(handovers.updates[i]).ok();
  soft_.Apply(handovers.soft);
  state::ClientTimeoutPlan timeouts =
      state::PlanClientTimeouts(state(), soft_, NowMs(), Stamp(), policy);
  for (size_t i = 0; i < timeouts.updates.size(); ++i) Submit(timeouts.updates[i]).ok();
  soft_.Apply(timeouts.soft);
  // Closure deadlines (ClosureDispatcher's deadline timer).
  state::EndingPlan deadlines = state::PlanDeadlines(state(), Stamp());
  if (!deadlines.updates.empty() && Carry(deadlines.updates).ok())
    TellWorkersToDrop(deadlines.running);
  // Job GC, every 50 ms.
  const int64_t now = ctx_.net.now_ms();
  if (now < next_gc_ms_) return;
  next_gc_ms_ = now + 50;
  state::JobGcPlan gc = state::PlanJobGc(state(), Stamp(), policy);
  for (size_t i = 0; i < gc.updates.size(); ++i) Submit(gc.updates[i]).ok();
  soft_.Apply(gc.soft);
}

}  // namespace dispatch::sim
