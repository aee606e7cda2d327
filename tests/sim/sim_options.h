// The knobs of one simulated run. Everything but `seed`, `bug` and the step
// bounds is drawn from the seed (SimParams::Draw), so a seed names a whole
// world: how many actors, how lossy the network, which faults and how often,
// which closure policy.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "state/closure_planner.h"

namespace dispatch::sim {

// Bugs the harness can plant, to prove that the checker notices
// (SimulationChecker tests in sim_test.cc): through a test-only hook in the
// shipping planners or commit pipeline, or as a wrong input to the planners.
// kNone in real runs.
enum class SimBug {
  kNone,
  kReplyBeforeCommit,        // replies leave before their updates are committed (planted in
                             // reactor::CommitPipeline through CommitPipelineTesting)
  kIgnoreFunctions,          // the planner is told every worker runs every function
  kUnjournaledRelease,       // releases are applied but not journaled (CommitPipelineTesting,
                             // as above)
  kForgetOutcome,            // a coordinator session drops an outcome instead of sending it
                             // (state::PickResults through ClosurePolicy::planted_bug)
  kRetryForever,             // the planner is given max_closure_attempts 0 (unlimited)
  kSplitRetryNotIdempotent,  // a getSplit retry is answered with fresh splits (planted in
                             // state::PlanGetSplit through DataPolicy::planted_bug)
  kForgetRefusals,           // a late copy of a refused schedule is not refused again
                             // (state::PlanScheduleCall through ClosurePolicy::planted_bug)
  kPushNoInputs,             // closures are pushed without their inputs' results
                             // (state::PlanPush through ClosurePolicy::planted_bug)
  kRoundRobinIgnoresRounds,  // a pending task is accepted at its target round whatever round
                             // the consumer is at (state::PlanClientHeartbeat, as above)
  kEndSplitsWhileHeld,       // a requeueing job's repetition ends while another task holds
                             // splits of it (state::PlanGetSplit, as above)
};
const char* SimBugName(SimBug bug);

struct SimParams {
  int num_workers = 3;
  int num_coordinators = 2;
  int num_consumers = 2;
  int num_functions = 3;             // "f0".."f<n-1>"; workers register subsets
  int max_closures = 40;             // scheduled per coordinator, at most
  double loss = 0.02;                // a message is lost (and its connection breaks)
  double duplicate = 0.03;           // a request is delivered twice
  int max_delay_ms = 5;              // delivery delay: 1..max (reordering)
  double worker_death = 0.004;       // per worker per step
  double half_open = 0.3;            // a death the dispatcher hears of only by timeout
  double restart = 0.004;            // per step: the dispatcher dies and replays
  double crash_before_commit = 0.5;  // a restart drops the pass's uncommitted batch
  bool commit_hold = true;           // pushes leave before their assignment commits
  uint64_t snapshot_every = 40;      // records between snapshots (0: never)
  state::ClosurePolicy policy;
  int64_t worker_timeout_ms = 400;
  int64_t client_timeout_ms = 400;
  int64_t job_gc_timeout_ms = 300;
  // --max-splits-per-call: a getSplit asking for more gets this many.
  uint64_t max_splits_per_call = 65536;
  // --worker-grace-ms (cut to the worker timeout, as the dispatcher does).
  int64_t worker_grace_ms = 100;
  // A dead worker comes back at a fresh address (a new pod elsewhere) rather
  // than its own; its old address never sees a worker again.
  double new_address = 0.5;

  static SimParams Draw(std::mt19937_64& rng);
  std::string ToString() const;
};

struct SimOptions {
  uint64_t seed = 1;
  int steps = 400;           // steps with faults
  int quiesce_steps = 4000;  // most steps of the healed world before liveness fails
  SimBug bug = SimBug::kNone;
};

}  // namespace dispatch::sim
