#include "state/result_picker.h"

#include <algorithm>

#include "state/result_bytes.h"

namespace dispatch::state {

bool OutcomeOwed(const DispatcherState& state, const SortedIdSet& released, uint64_t closure_id) {
  const Closure* closure = state.FindClosure(closure_id);
  return closure != nullptr && IsClosureDone(closure->state) && !released.contains(closure_id);
}

std::vector<uint64_t> OwedOutcomes(const DispatcherState& state, const SortedIdSet& released,
                                   uint64_t coordinator_id) {
  std::vector<uint64_t> owed;
  for (const Closure* closure : state.ClosuresForCoordinator(coordinator_id)) {
    if (IsClosureDone(closure->state) && !released.contains(closure->id))
      owed.push_back(closure->id);
  }
  return owed;
}

size_t ForgottenAtFront(const DispatcherState& state, const SortedIdSet& released,
                        const std::deque<uint64_t>& undelivered) {
  size_t n = 0;
  while (n < undelivered.size() && !OutcomeOwed(state, released, undelivered[n])) ++n;
  return n;
}

ResultPick PickResults(const DispatcherState& state, const SortedIdSet& released,
                       const std::deque<uint64_t>& undelivered, uint32_t max,
                       const ResultLimits& limits, const ClosurePolicy& policy) {
  const uint64_t want =
      max == 0 ? limits.max_results_per_call : std::min<uint64_t>(max, limits.max_results_per_call);
  ResultPick pick;
  uint64_t bytes = 0;
  while (pick.taken < undelivered.size() && pick.ids.size() < want) {
    const uint64_t id = undelivered[pick.taken];
    if (!OutcomeOwed(state, released, id)) {
      ++pick.taken;  // released
      continue;
    }
    if (policy.planted_bug == PlantedBug::kForgetOutcome && id % 5 == 0) {
      ++pick.taken;  // TEST-ONLY planted bug: dropped, never handed out
      continue;
    }
    const uint64_t size = OutcomeBytes(*state.FindClosure(id));
    if (!pick.ids.empty() && bytes + size > limits.max_result_bytes_per_call) break;
    bytes += size;
    pick.ids.push_back(id);
    ++pick.taken;
  }
  return pick;
}

}  // namespace dispatch::state
