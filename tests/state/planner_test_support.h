// Helpers for the planner tests (closure_planner, closure_endings,
// closure_dependencies, the data service's planners): a stamp, a live
// worker, applying a run of updates, and applying a plan.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "state/closure_planner.h"
#include "state/dispatcher_state.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state::testing {

// Ids in order, as plans and answers list them.
using IdList = std::vector<uint64_t>;

// The reactor's clock (1 ms) and the journal's per-record limit.
inline constexpr Stamp kStamp{1000, 16u << 20};

// A live worker with `slots` closure slots that registered `functions`.
LiveWorker Live(uint64_t id, uint32_t slots, FunctionSet functions = {"noop", "echo"});

// Applies `updates` to `state` in order; each one refused fails the test.
template <typename... Updates>
void ApplyEach(DispatcherState& state, const Updates&... updates) {
  for (const OwnedUpdate* update : {&updates...}) EXPECT_TRUE(Applies(state, *update));
}

// Success when every update of `updates` applies in order and the indexes
// still agree after each.
::testing::AssertionResult AppliesAll(DispatcherState& state, const UpdateList& updates);

}  // namespace dispatch::state::testing
