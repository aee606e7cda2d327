// PlantedBug: bugs a test plants in the shipping planners to prove that the
// simulation's checker notices them (tests/sim, SimulationChecker). Each is
// a wrong decision the planner makes only when told to, so the checker tests
// the code the dispatcher runs, not a copy of it. TEST-ONLY: the reactor
// never sets one (its policies keep kNone).
#pragma once

namespace dispatch::state {

enum class PlantedBug {
  kNone,
  kSplitRetryNotIdempotent,  // PlanGetSplit answers a retry with fresh splits
  kRoundRobinIgnoresRounds,  // PlanClientHeartbeat accepts a pending task whatever round
                             // the consumer reports
  kForgetRefusals,           // PlanScheduleCall does not look for an earlier refusal
  kPushNoInputs,             // PlanPush sends closures without their inputs' results
  kForgetOutcome,            // PickResults drops outcomes (every closure id a multiple of 5)
  kEndSplitsWhileHeld,       // PlanGetSplit ends a requeueing job's repetition while another
                             // task holds splits of it
};

}  // namespace dispatch::state
