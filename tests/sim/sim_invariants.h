// SimInvariants: the checker. It follows every committed Update (with the
// committed state before and after it), every assignment the planner makes
// and everything the actors receive, and records the first violation. It
// works out what an update did by reading the update itself, never from the
// state's Effects: an oracle independent of the code it checks, so an effect
// the state fails to record cannot hide itself.
// - closures: each ends (finished, failed or cancelled) exactly once and is
//   released only after that and after its coordinator got its outcome; a
//   cancelled closure's coordinator had a first error (an infrastructure
//   failure is none); attempts never pass max_closure_attempts (plus one per
//   dispatcher restart that found it running: PlanRecovery uses none up);
//   every assignment goes to a worker process that registered the functions;
//   every outcome delivered is the one journaled (a result is the function's
//   result, read back intact, computed from its inputs' results), and never
//   changes; a cancelled closure was asked to be, or its coordinator had a
//   first error; a deadline fails a closure only once it has passed; a
//   closure runs only once its inputs finished, and a failed input ends its
//   dependants; an assignment pass never leaves a closure queued that a
//   worker it fed could run and that comes first (higher priority, or the
//   same and queued earlier);
// - splits: per (job, repetition) each split is granted, and received by a
//   worker, at most once plus once per requeue of it; a retried getSplit
//   (same task and sequence) gets the same answer; a repetition that ended
//   handed out every split; for a job that requeues, no split is lost: the
//   splits a task holds (its last grant, until it asks again or finishes)
//   are requeued when its worker is removed or the task is handed over;
// - round robin: a task that joins a round-robin job (pending, then started
//   by its consumers' agreement) starts at a round its consumer has not read
//   past;
// - at the end (Finish): everything scheduled ended and was delivered.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tests/sim/sim_context.h"
#include "tests/sim/sim_messages.h"

namespace dispatch::sim {

class SimInvariants : public SimObserver {
 public:
  // `functions_of(address, incarnation)`: what that worker process registered.
  using FunctionsOf =
      std::function<std::shared_ptr<const state::FunctionSet>(const std::string&, uint64_t)>;
  SimInvariants(const state::ClosurePolicy& policy, FunctionsOf functions_of)
      : policy_(policy), functions_of_(std::move(functions_of)) {}

  void BeforeCommit(const state::DispatcherState& before, journal::Update::Reader update) override;
  void AfterCommit(const state::DispatcherState& after, journal::Update::Reader update) override;
  void Assigned(const state::DispatcherState& state, const state::ClosureRun& run) override;
  void PassPlanned(const state::DispatcherState& before,
                   const std::vector<state::LiveWorker>& workers,
                   const std::vector<state::ClosureRun>& runs) override;
  void CancelAsked(const std::vector<uint64_t>& closure_ids) override;
  void Restarted(const state::DispatcherState& recovered) override;
  void SplitAnswered(uint64_t job_id, uint64_t task_id, uint64_t sequence,
                     const SplitReply& reply) override;
  void RoundRobinTaskStarted(uint64_t job_client_id, uint64_t task_id, int64_t starting_round,
                             int64_t consumer_round) override;
  void OutcomeDelivered(uint64_t coordinator_id, const Outcome& outcome) override;
  void Fail(const std::string& what) override;

  // Liveness: every closure ever scheduled ended, its outcome reached its
  // coordinator, and it was released. Reports what is missing.
  void Finish(const state::DispatcherState& final_state);

  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }
  uint64_t num_closures() const { return closures_.size(); }
  uint64_t num_splits_granted() const { return splits_granted_; }
  uint64_t num_checks() const { return checks_; }
  // Round-robin pending tasks journaled: created, accepted and rejected by a
  // consumer's heartbeat.
  uint64_t num_pending_created() const { return pending_created_; }
  uint64_t num_handed_over() const { return handed_over_; }
  uint64_t num_pending_accepted() const { return pending_accepted_; }
  uint64_t num_pending_rejected() const { return pending_rejected_; }

 private:
  struct ShadowClosure {
    uint64_t coordinator_id = 0;
    std::string args;
    int ends = 0;
    state::ClosureState state = state::ClosureState::QUEUED;
    std::string error;
    uint32_t attempts = 0;
    uint32_t recoveries = 0;  // restarts that found it running
    bool delivered = false;
    bool released = false;
    std::vector<uint64_t> inputs;
    int64_t deadline_micros = 0;
  };
  using SplitKey = std::tuple<uint64_t, int64_t, uint64_t>;  // job, repetition, index

  void Ended(uint64_t closure_id, state::ClosureState state, const std::string& error);
  void CheckUpdate(const state::DispatcherState& after, journal::Update::Reader update);
  // The closure's result as the function computes it from its args and its
  // inputs' results.
  std::string ExpectedResult(uint64_t closure_id) const;
  void Require(bool ok, const std::function<std::string()>& what);
  // The tasks hold no split any more (consumed, requeued or dropped).
  void ForgetHeld(const std::vector<uint64_t>& task_ids);

  const state::ClosurePolicy policy_;
  FunctionsOf functions_of_;
  std::string failure_;
  uint64_t checks_ = 0;
  std::map<uint64_t, ShadowClosure> closures_;
  std::set<uint64_t> coordinators_with_error_;
  std::set<uint64_t> cancel_asked_;
  std::vector<uint64_t> dependants_moved_;  // by the update being committed
  std::set<uint64_t> ended_by_update_;       // its own items
  // Splits.
  std::map<SplitKey, int> granted_, received_, requeued_;
  std::map<uint64_t, std::vector<std::vector<uint64_t>>> requeue_before_;  // job -> providers
  // Requeueing jobs: what each (task, provider) holds, as read from the
  // updates; and the tasks the update being committed takes from their
  // worker (a removal's, a hand-over's), whose holdings it must requeue.
  std::map<std::pair<uint64_t, uint32_t>, std::vector<uint64_t>> held_;
  std::vector<uint64_t> leaving_tasks_;
  std::map<std::pair<uint64_t, uint64_t>, SplitReply> answers_;            // (task, sequence)
  uint64_t splits_granted_ = 0;
  uint64_t pending_created_ = 0, pending_accepted_ = 0, pending_rejected_ = 0;
  uint64_t handed_over_ = 0;
};

}  // namespace dispatch::sim
