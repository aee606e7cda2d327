// ResultPicker: which outcomes a coordinator session hands out and which it
// forgets. A session owes its coordinator the outcome of each of its closures
// that ended, once, oldest first; one released since (gone from the state,
// or its release pending) is forgotten. One awaitResults answer takes at most
// `max` (0: the per-call limit) and the per-call limit, while their bytes fit
// the per-call budget (the first always goes); the rest wait for the next
// call. Pure: CoordinatorSession and the simulation keep the session's list
// and carry the pick out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "state/closure_planner.h"
#include "state/dispatcher_state.h"
#include "state/index_util.h"

namespace dispatch::state {

// The per-call limits (the dispatcher's --max-results-per-call and
// --max-result-bytes-per-call; defaults as there).
struct ResultLimits {
  uint64_t max_results_per_call = 65536;
  uint64_t max_result_bytes_per_call = 4ull << 20;
};

struct ResultPick {
  std::vector<uint64_t> ids;  // to hand out, in order
  size_t taken = 0;           // off the front of the list: handed out or forgotten
};

// The session owes this outcome: the closure is done and not released
// (`released`: the releases not journaled yet).
bool OutcomeOwed(const DispatcherState& state, const SortedIdSet& released, uint64_t closure_id);

// What a new session of the coordinator owes: every outcome not released
// yet, in id order.
std::vector<uint64_t> OwedOutcomes(const DispatcherState& state, const SortedIdSet& released,
                                   uint64_t coordinator_id);

// How many outcomes at the front of `undelivered` are forgotten (released
// since): a session with more than that has one to hand out.
size_t ForgottenAtFront(const DispatcherState& state, const SortedIdSet& released,
                        const std::deque<uint64_t>& undelivered);

// One answer's outcomes, off the front of `undelivered`. `policy` is read
// for its planted bug only (kForgetOutcome: an outcome whose closure id is a
// multiple of 5 is taken and never handed out).
ResultPick PickResults(const DispatcherState& state, const SortedIdSet& released,
                       const std::deque<uint64_t>& undelivered, uint32_t max,
                       const ResultLimits& limits, const ClosurePolicy& policy);

}  // namespace dispatch::state
