// SimDispatcher: the simulation's stand-in for the reactor. It owns the real
// DispatcherState and makes every decision with the same state/ functions the
// reactor calls (closure_planner.h, closure_requests.h, schedule_call_planner.h,
// push_planner.h, result_picker.h, closure_updates.h; for the data service
// split_planner.h, worker_planner.h, job_planner.h and consumer_planner.h),
// and keeps only what the reactor keeps beside the state: the soft state the
// planners read (state/soft_state.h: worker liveness, consumer rounds), the
// workers' control capabilities, what heartbeats said (LiveWorker),
// coordinator sessions, pending releases. Its
// durability is the shipping reactor::CommitPipeline's, over the simulated
// disk (SimJournal) and clock: Submit applies an Update into the pass's
// batch; EndPass commits the batch (journal records and result rows
// together), and the pipeline releases the replies and pushes parked on it
// (WhenDurable, the form of its Barrier without an event loop). Crash drops
// the pipeline with its batch and everything soft, and rebuilds the state
// from the journal (checked against a replay from the empty state and from
// the latest snapshot), then recovers as DataService::Start does.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "reactor/commit_pipeline.h"
#include "state/closure_planner.h"
#include "state/closure_updates.h"
#include "state/data_policy.h"
#include "state/dispatcher_state.h"
#include "state/effects.h"
#include "state/refused_schedules.h"
#include "state/soft_state.h"
#include "tests/sim/sim_context.h"
#include "tests/sim/sim_journal.h"
#include "tests/sim/sim_messages.h"

namespace dispatch::sim {

class SimDispatcher {
 public:
  explicit SimDispatcher(SimContext& ctx);

  uint64_t incarnation() const { return incarnation_; }
  // The live state: the pass's batch applied.
  const state::DispatcherState& state() const { return pipeline_->state(); }
  const state::DispatcherState& committed() const { return journal_.committed(); }
  size_t journal_size() const { return journal_.size(); }
  uint64_t restarts() const { return incarnation_ - 1; }

  // ---- Workers (worker_service.cc, split_service.cc) ----------------------
  void WorkerHeartbeat(uint64_t conn, const HeartbeatRequest& request,
                       std::function<void(const HeartbeatReply&)> reply);
  void Reports(uint64_t conn, uint64_t worker_id, const std::vector<ClosureReport>& reports);
  void WorkerUpdate(uint64_t conn, const std::vector<uint64_t>& completed_tasks);
  void GetSplit(uint64_t conn, const SplitRequest& request,
                std::function<void(const SplitReply&)> reply);

  // ---- Coordinators (coordinator_session.cc) ------------------------------
  void Schedule(uint64_t conn, uint64_t coordinator_id, const std::vector<ClosureSpec>& specs,
                std::function<void(const ScheduleReply&)> reply);
  // Releases `release`, then answers the session's undelivered outcomes.
  void AwaitResults(uint64_t conn, uint64_t coordinator_id, const std::vector<uint64_t>& release,
                    std::function<void(const std::vector<Outcome>&)> reply);
  void Join(uint64_t conn, uint64_t coordinator_id, std::function<void(const JoinReply&)> reply);
  void Cancel(uint64_t conn, uint64_t coordinator_id, const std::vector<uint64_t>& closure_ids,
              std::function<void(const CancelReply&)> reply);

  // ---- Consumers (dataset_service.cc, job_service.cc) ---------------------
  void RegisterDataset(uint64_t conn, uint64_t fingerprint, uint64_t num_splits,
                       int64_t repetitions, std::function<void(uint64_t)> reply);
  void GetOrCreateJob(uint64_t conn, const JobRequest& request,
                      std::function<void(const JobReply&)> reply);
  void ClientHeartbeat(uint64_t conn, const ClientHeartbeatRequest& request,
                       std::function<void(const ClientHeartbeatReply&)> reply);
  void ReleaseJobClient(uint64_t conn, uint64_t client_id, std::function<void(Status)> reply);

  // ---- The loop ------------------------------------------------------------
  // The end of a loop pass: timers due, the assignment pass, the commit, the
  // parked replies and pushes.
  void EndPass();
  // The process dies (with or without its pass's batch committed) and starts
  // again from the journal.
  void Crash(bool commit_first);
  // Replays the journal from the empty state and from the snapshot; both must
  // give the committed state's digest.
  void CheckReplay();

 private:
  // A worker's WorkerControl capability (WorkerRegistry's): where closures are pushed.
  using Control = std::function<void(const std::vector<RunPush>&)>;
  struct Live {  // ClosureDispatcher's LiveEntry
    std::string address;
    state::LiveWorker worker;
  };
  struct Session {  // CoordinatorSession
    uint64_t coordinator_id = 0;
    std::deque<uint64_t> undelivered;
  };

  // Durability (the commit pipeline). A new process's pipeline over the
  // journal, with the sessions' observer and the planted bug's hooks.
  void StartPipeline(state::DispatcherState recovered);
  // The live state equals the journal's once nothing is pending.
  void CheckCommitted();
  int64_t NowMicros() const;
  // The serving clock (the reactor's ServingClock: the simulation never stalls).
  uint64_t NowMs() const { return static_cast<uint64_t>(ctx_.net.now_ms()); }
  state::Stamp Stamp() const;
  // The closure policy the planners get (the drawn one, or a planted bug's).
  state::ClosurePolicy Policy() const;
  // The data-service policy the planners get (the drawn one, with a planted
  // bug of theirs).
  state::DataPolicy DataPolicy() const;
  // The split sources of the datasets' metadata ("<splits> <repetitions>").
  state::SplitSourceLookup SplitSources() const;
  Status Submit(journal::Update::Reader update);
  Status Carry(const state::UpdateList& updates);
  // Builds one Update with `fill` and submits it (DataService::Submit).
  Status SubmitBuilt(const std::function<void(journal::Update::Builder)>& fill);
  // Sends `deliver` on `conn` once what it may have observed is durable.
  void Park(uint64_t conn, std::function<void()> deliver);
  // Tells the workers running them to drop these closures (cancelClosures).
  void TellWorkersToDrop(const std::map<uint64_t, std::vector<uint64_t>>& running);
  void NotifyDone(uint64_t coordinator_id, uint64_t closure_id);
  void Recover();

  // Workers and closures.
  Status RemoveWorkerAt(const std::string& address, const std::string& reason);
  // The capability of the worker at `address`; null when none.
  const Control* ControlAt(const std::string& address) const;
  std::vector<state::LiveWorker> LiveWorkers() const;
  void AssignQueued();
  // Pushes the closures of `closure_ids` still assigned to the worker, with
  // their inputs' results (state::PlanPush).
  void PushAssigned(uint64_t worker_id, const std::vector<uint64_t>& closure_ids);
  void Push(uint64_t worker_id, std::vector<RunPush> runs);
  void PushFailed(uint64_t worker_id, const std::vector<RunPush>& runs);
  void FlushReleases();
  Session& SessionOf(uint64_t conn, uint64_t coordinator_id);
  Outcome OutcomeOf(const state::Closure& closure) const;
  void OnBroken(uint64_t conn);
  void RunTimers();
  TaskInfo InfoOf(const state::Task& task) const;

  SimContext& ctx_;
  SimJournal journal_;  // the disk: survives a crash
  SimClock clock_;
  // The process's pipeline (its state, batch and parked replies); a crash
  // destroys it, a restart makes another from the journal.
  std::unique_ptr<reactor::CommitPipeline> pipeline_;
  uint64_t incarnation_ = 1;

  state::SoftState soft_;                    // a restart forgets it
  std::map<std::string, Control> controls_;  // by worker address
  std::map<uint64_t, Live> live_;
  uint64_t workers_attached_ = 0;
  uint64_t turn_ = 0;
  state::SortedIdSet pending_releases_;
  state::RefusedSchedules refused_;       // in memory: a restart forgets it
  std::map<uint64_t, Session> sessions_;  // by connection
  int64_t next_gc_ms_ = 0;
};

}  // namespace dispatch::sim
