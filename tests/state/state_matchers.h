// GoogleTest helpers for state tests: apply an update and say why it failed;
// expect a rejection with a given code and message, and prove that the
// rejected update changed nothing (digest, next ids and indexes).
#pragma once

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "common/status.h"
#include "state/dispatcher_state.h"
#include "tests/state/update_builders.h"

namespace dispatch::state::testing {

// Success when `state.Apply(update)` is ok (and the indexes still agree).
::testing::AssertionResult Applies(DispatcherState& state, const OwnedUpdate& update);

// Success when Check and Apply both reject `update` with `code`, the message
// contains `needle`, and the state's digest and indexes are unchanged.
::testing::AssertionResult Rejects(DispatcherState& state, const OwnedUpdate& update,
                                   StatusCode code, std::string_view needle);

// Worker 1 ("a"); closure 1 of coordinator 7 queued, 2 waiting on 1, 3
// waiting on 2 (every update must apply).
DispatcherState DependencyChain();

// The ids of `closures`, in order (for comparing query results).
std::vector<uint64_t> Ids(const std::vector<const Closure*>& closures);

}  // namespace dispatch::state::testing
