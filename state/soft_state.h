// SoftState: what the dispatcher knows beside the journaled state and the
// planners read: the consumers' heartbeats and rounds, and the workers'
// liveness. Not journaled: a restart starts it anew (Initialize) from the
// recovered state. The reactor owns one (reactor/data_service.h), the
// simulation another; what needs the loop (connections' capabilities, push
// promises, timers) stays in the reactor. The closure side's soft state
// (live workers' slots and functions, refused schedules, pending releases)
// is to join this struct.
//
// The rule: planners take `const SoftState&` and never change it. A decision
// that changes soft state returns the change in its plan (`SoftChanges`); the
// caller applies it with Apply once it has carried the plan's Updates, as it
// does the Updates themselves, so a refused request changes nothing and soft
// state never runs ahead of the state it describes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "state/consumer_rounds.h"
#include "state/dispatcher_state.h"
#include "state/worker_absence.h"
#include "state/worker_liveness.h"

namespace dispatch::state {

// What a plan changes in the soft state. Times are the plan's: `now_ms` on
// the serving clock, `now_micros` the Stamp's.
struct SoftChanges {
  struct ClientHeard {
    uint64_t job_client_id = 0;
    int64_t round = -1;  // the round it reported; -1: none
    uint64_t now_ms = 0;
    int64_t now_micros = 0;
  };
  struct RemovalVote {
    uint64_t task_id = 0;
    uint32_t consumer_index = 0;
    int64_t round = 0;
  };
  struct WorkerHeard {
    std::string address;
    uint64_t worker_id = 0;
    uint64_t connection = 0;
    uint64_t now_ms = 0;
    int64_t now_micros = 0;
  };
  struct AddressGone {
    std::string address;
    uint64_t now_ms = 0;
  };

  std::vector<ClientHeard> clients_heard;
  // Released clients and their jobs (remembered for late heartbeats).
  std::vector<std::pair<uint64_t, uint64_t>> clients_released;
  // Clients gone from the state without a release.
  std::vector<uint64_t> clients_forgotten;
  std::optional<RemovalVote> removal_vote;
  // Tasks whose removal agreement ends (removed, or their job collected).
  std::vector<uint64_t> removals_forgotten;
  // A worker heard from is registered at its address: no absence there.
  std::optional<WorkerHeard> worker_heard;
  // A removed worker's address that keeps unfinished tasks.
  std::optional<AddressGone> address_gone;
  // Absences that are over (hand_over_planner.h).
  std::vector<std::string> absences_forgotten;

  bool empty() const {
    return clients_heard.empty() && clients_released.empty() && clients_forgotten.empty() &&
           !removal_vote.has_value() && removals_forgotten.empty() && !worker_heard.has_value() &&
           !address_gone.has_value() && absences_forgotten.empty();
  }
};

struct SoftState {
  ConsumerRounds consumers;
  WorkerLiveness workers;
  WorkerAbsence absence;

  // After recovery (or a reset): every client and worker of `state` counts
  // as heard from now, and every address whose tasks have no worker as
  // absent since now.
  void Initialize(const DispatcherState& state, uint64_t now_ms, int64_t now_micros);
  // Applies a plan's changes, in the order SoftChanges lists them. Returns
  // whether the worker heard (if any) attached anew (WorkerLiveness::Heard).
  bool Apply(const SoftChanges& changes);
};

}  // namespace dispatch::state
