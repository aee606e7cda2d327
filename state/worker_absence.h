// WorkerAbsence: the addresses that have unfinished tasks and no registered
// worker, each with the time it has been so since (serving clock, ms): what
// the hand-over planner (hand_over_planner.h) measures a worker's grace
// period from. Soft state (soft_state.h), not journaled: an address becomes
// absent when its worker is removed (PlanWorkerRemoval), and present again
// when a worker is heard from there (it registered at the address); a
// restart counts every such address as absent since the restart (Initialize:
// a fresh grace, as workers get a fresh timeout).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "state/dispatcher_state.h"

namespace dispatch::state {

class WorkerAbsence {
 public:
  // After recovery: every address of `state` with unfinished tasks and no
  // registered worker is absent since `now_ms`; nothing else is.
  void Initialize(const DispatcherState& state, uint64_t now_ms);
  // The worker at `address` was removed at `now_ms`. An address absent
  // already keeps its earlier time.
  void Gone(const std::string& address, uint64_t now_ms);
  // A worker is at `address` again, or it has nothing left to wait for.
  void Forget(std::string_view address);
  // Absent addresses, by address, with the time since which they are.
  const std::map<std::string, uint64_t, std::less<>>& since_ms() const { return since_ms_; }

 private:
  std::map<std::string, uint64_t, std::less<>> since_ms_;
};

}  // namespace dispatch::state
