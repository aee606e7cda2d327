// SimContext: what every part of one simulated run shares: the seed's random
// stream (the only one), the network and its clock, the drawn parameters, the
// planted bug, and the observer that checks invariants. Send is how anyone
// puts a message on a wire, with the faults the parameters ask for: a lost
// message breaks its connection (as TCP would: both ends learn of it), a
// duplicable request may arrive twice, every message takes 1..max_delay_ms.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>

#include "schema/journal.capnp.h"
#include "state/closure_updates.h"
#include "state/dispatcher_state.h"
#include "tests/sim/sim_network.h"
#include "tests/sim/sim_options.h"

namespace dispatch::sim {

struct SplitReply;
struct Outcome;

// Checks invariants as things happen (tests/sim/sim_invariants.h).
class SimObserver {
 public:
  virtual ~SimObserver() = default;
  // `update` commits: `before` is the committed state it applies to; After
  // gets the state it made.
  virtual void BeforeCommit(const state::DispatcherState& before,
                            journal::Update::Reader update) = 0;
  virtual void AfterCommit(const state::DispatcherState& after, journal::Update::Reader update) = 0;
  // The planner assigned `run` (applied to the live state).
  virtual void Assigned(const state::DispatcherState& state, const state::ClosureRun& run) = 0;
  // One assignment pass planned `runs` for `workers`; `before` is the state
  // the planner read (the runs not applied yet).
  virtual void PassPlanned(const state::DispatcherState& before,
                           const std::vector<state::LiveWorker>& workers,
                           const std::vector<state::ClosureRun>& runs) = 0;
  // A coordinator's cancel of `closure_ids` was planned.
  virtual void CancelAsked(const std::vector<uint64_t>& closure_ids) = 0;
  // The dispatcher restarted; `recovered` is the state rebuilt from the
  // journal, before PlanRecovery's updates.
  virtual void Restarted(const state::DispatcherState& recovered) = 0;
  // A worker got an answer to getSplit (task, sequence) of `job_id`.
  virtual void SplitAnswered(uint64_t job_id, uint64_t task_id, uint64_t sequence,
                             const SplitReply& reply) = 0;
  // A round-robin consumer (job client) learned that `task_id` of its job
  // starts at `starting_round`, while it was at `consumer_round`.
  virtual void RoundRobinTaskStarted(uint64_t job_client_id, uint64_t task_id,
                                     int64_t starting_round, int64_t consumer_round) = 0;
  // A coordinator got an outcome from awaitResults.
  virtual void OutcomeDelivered(uint64_t coordinator_id, const Outcome& outcome) = 0;
  virtual void Fail(const std::string& what) = 0;
};

struct SimContext {
  SimContext(uint64_t seed, SimParams p, SimBug b) : rng(seed), params(p), bug(b) {}

  std::mt19937_64 rng;
  SimNetwork net;
  SimParams params;
  SimBug bug;
  SimObserver* observer = nullptr;
  // The dispatcher hears of a broken connection here (set by the dispatcher).
  std::function<void(uint64_t connection)> on_broken;

  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  int64_t Delay() { return Uniform(1, params.max_delay_ms); }

  // Breaks `connection`: closed at once; the dispatcher hears of it a little
  // later, unless it is half-open (then only a timeout finds out).
  void Break(uint64_t connection) {
    if (!net.IsOpen(connection)) return;
    net.Close(connection);
    if (on_broken && !Chance(params.half_open)) {
      auto notify = on_broken;
      net.Send(control_connection, Delay(), [notify, connection] { notify(connection); });
    }
  }

  void Send(uint64_t connection, std::function<void()> deliver, bool duplicable,
            std::function<void()> on_drop = nullptr) {
    if (!net.IsOpen(connection)) {
      if (on_drop) net.Send(connection, Delay(), nullptr, std::move(on_drop));
      return;
    }
    if (Chance(params.loss)) {
      Break(connection);
      if (on_drop) net.Send(connection, Delay(), nullptr, std::move(on_drop));
      return;
    }
    if (duplicable && Chance(params.duplicate)) net.Send(connection, Delay() + 1, deliver);
    net.Send(connection, Delay(), std::move(deliver), std::move(on_drop));
  }

  // A reply of the dispatcher: as Send, and once written it reaches its
  // caller even if the dispatcher dies meanwhile (SimNetwork).
  void Reply(uint64_t connection, std::function<void()> deliver) {
    if (!net.IsOpen(connection)) return;
    if (Chance(params.loss)) {
      Break(connection);
      return;
    }
    net.Send(connection, Delay(), std::move(deliver), nullptr, /*written=*/true);
  }

  // The dispatcher process's own channel (OS events, timers); reopened at
  // each restart.
  uint64_t control_connection = 0;
};

}  // namespace dispatch::sim
