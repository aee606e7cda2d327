// Helpers for the planner tests (closure_planner, closure_endings,
// closure_dependencies): a stamp, a live worker, and applying a plan.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "state/closure_planner.h"
#include "state/dispatcher_state.h"

namespace dispatch::state::testing {

// The reactor's clock (1 ms) and the journal's per-record limit.
inline constexpr Stamp kStamp{1000, 16u << 20};

// A live worker with `slots` closure slots that registered `functions`.
LiveWorker Live(uint64_t id, uint32_t slots, FunctionSet functions = {"noop", "echo"});

// Success when every update of `updates` applies in order and the indexes
// still agree after each.
::testing::AssertionResult AppliesAll(DispatcherState& state, const UpdateList& updates);

}  // namespace dispatch::state::testing
