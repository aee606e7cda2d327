#include "state/push_planner.h"

#include <string>

#include "state/result_bytes.h"

namespace dispatch::state {

Result<std::vector<PushedClosure>> PlanPush(const DispatcherState& state, uint64_t worker_id,
                                            const std::vector<uint64_t>& closure_ids,
                                            uint64_t max_push_bytes, const ClosurePolicy& policy) {
  std::vector<PushedClosure> pushes;
  pushes.reserve(closure_ids.size());
  for (uint64_t id : closure_ids) {
    const Closure* closure = state.FindClosure(id);
    if (closure == nullptr || closure->state != ClosureState::ASSIGNED ||
        closure->worker_id != worker_id) {
      continue;  // lost its worker or was cancelled meanwhile
    }
    PushedClosure& pushed = pushes.emplace_back();
    pushed.closure = closure;
    pushed.run = ClosureRun{id, worker_id, closure->attempts};
    if (closure->inputs.empty()) continue;
    uint64_t total = closure->function_name.size() + closure->args.size();
    for (uint64_t input_id : closure->inputs) {
      // The state keeps every input of a closure not done (finished, not
      // released: releases wait for the dependants).
      const Closure* input = state.FindClosure(input_id);
      if (input == nullptr || input->state != ClosureState::FINISHED) {
        return InternalError("closure " + std::to_string(id) + " was assigned before its input " +
                             std::to_string(input_id) + " finished");
      }
      total += ResultBytes(*input);
    }
    if (total > max_push_bytes) {
      pushed.refused = ResourceExhaustedError(
          "closure " + std::to_string(id) + " with its " + std::to_string(closure->inputs.size()) +
          " input results takes " + std::to_string(total) + " bytes, over the limit of " +
          std::to_string(max_push_bytes) + " bytes per push to a worker");
      continue;
    }
    if (policy.planted_bug == PlantedBug::kPushNoInputs) continue;  // TEST-ONLY planted bug
    pushed.inputs = closure->inputs;
  }
  return pushes;
}

}  // namespace dispatch::state
