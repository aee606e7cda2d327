// RunSimulation: one seed, start to end. The seed draws the world
// (SimParams::Draw) and drives every choice after; the run has two phases:
// `steps` steps with faults (lost, late, reordered and repeated messages,
// worker deaths and new processes, half-open connections, dispatcher
// restarts with or without the pass's batch committed), then the world heals
// (no more faults; every worker comes back with every function; coordinators
// and consumers stop starting work) and must settle within `quiesce_steps`:
// every closure ended, delivered and released, every job finished. The
// invariants are checked at every step (SimInvariants) and the journal is
// replayed at every restart and at the end.
#pragma once

#include <cstdint>
#include <string>

#include "tests/sim/sim_options.h"

namespace dispatch::sim {

struct SimResult {
  uint64_t seed = 0;
  bool ok = true;
  std::string failure;  // the first violation
  std::string params;   // the drawn world
  int steps = 0;        // steps run, both phases
  uint64_t journal_records = 0;
  uint64_t restarts = 0;
  uint64_t closures = 0;
  uint64_t splits = 0;
  uint64_t checks = 0;
  // Round-robin pending tasks: created, accepted, rejected (journaled).
  uint64_t pending_created = 0;
  uint64_t pending_accepted = 0;
  uint64_t pending_rejected = 0;
  // Tasks finished for a worker gone past its grace period (HandOverTask).
  uint64_t handed_over = 0;
};

SimResult RunSimulation(const SimOptions& options);

// The one line that runs `seed` again.
std::string RerunCommand(uint64_t seed);

}  // namespace dispatch::sim
