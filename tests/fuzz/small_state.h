// The small state the journal and snapshot fuzz targets start from: built
// once per process by UpdateGenerator from a fixed seed, so it holds
// datasets, workers, jobs, tasks, splits, clients and closures in every
// state, and the ids a record names often exist. The same seed is used by
// make_seeds.cc, so seed records are valid against it.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "state/dispatcher_state.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/state/update_generator.h"

namespace dispatch::fuzz {

inline constexpr uint64_t kSmallStateSeed = 18;
inline constexpr int kSmallStateUpdates = 120;

// Applies `count` generated updates to an empty state; `generator` is left
// where it stopped, so the caller can draw updates valid for the result.
inline state::DispatcherState BuildSmallState(state::testing::UpdateGenerator& generator,
                                              int count = kSmallStateUpdates) {
  state::DispatcherState state;
  for (int i = 0; i < count; ++i) {
    state::testing::OwnedUpdate update = generator.Next(state);
    Status status = state.Apply(update.reader());
    FUZZ_CHECK(status.ok(), "generated update %d refused: %s", i, status.ToString().c_str());
  }
  return state;
}

}  // namespace dispatch::fuzz
