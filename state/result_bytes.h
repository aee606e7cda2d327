// The bytes a closure's result and outcome take, as the planners and the
// reactor count them against per-push and per-reply limits: a finished
// closure's result (inline, or only its size when storage keeps the bytes),
// a failed one's error.
#pragma once

#include <cstdint>

#include "state/records.h"

namespace dispatch::state {

inline uint64_t ResultBytes(const Closure& closure) {
  return closure.result_stored ? closure.result_size : closure.result.size();
}

// The bytes an outcome adds to a reply (its result or error).
inline uint64_t OutcomeBytes(const Closure& closure) {
  if (closure.state == ClosureState::FINISHED) return ResultBytes(closure);
  if (closure.state == ClosureState::FAILED) return closure.error.size();
  return 0;
}

}  // namespace dispatch::state
