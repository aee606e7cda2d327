// PushPlanner: what goes with a push of assigned closures to their worker.
// Each closure of the push still assigned there is pushed as the run it is
// now, with the results of its inputs, in its inputs' order (every input is
// finished: a closure is assigned only then); the caller reads those bytes.
// One whose function, args and input results come to more than one push
// holds fails instead of running: retrying cannot help. Pure: the reactor
// (closure_pushes.cc) and the simulation read the results and send.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "state/closure_planner.h"
#include "state/dispatcher_state.h"

namespace dispatch::state {

// Most closure bytes (function, args, input results) in one runClosures
// push; a worker with many slots gets several pushes rather than one past
// its limit.
inline constexpr uint64_t kMaxPushBytes = 16u << 20;

struct PushedClosure {
  const Closure* closure = nullptr;  // in the state planned against
  ClosureRun run;
  std::vector<uint64_t> inputs;  // the closures whose results go with it, in order
  // Not ok: the run fails with this (a user error, PlanUserError) instead of
  // being pushed. ResourceExhausted names the closure and the limit.
  Status refused;
};

// The closures of `closure_ids` still assigned to `worker_id`, in that order
// (one lost or cancelled meanwhile is left out), each with what goes with it
// under `max_push_bytes`. `policy` is read for its planted bug only.
// Internal when an input is not finished (a bug).
Result<std::vector<PushedClosure>> PlanPush(const DispatcherState& state, uint64_t worker_id,
                                            const std::vector<uint64_t>& closure_ids,
                                            uint64_t max_push_bytes, const ClosurePolicy& policy);

}  // namespace dispatch::state
