// UpdateGenerator: from a seed, a random sequence of updates that are valid
// against the state they are applied to (every variant shows up in long runs).
// Storage and replay tests journal thousands of them; state tests use it to
// compare live, replayed and snapshot-restored states. Deterministic per seed
// and per sequence of states it is shown.
#pragma once

#include <cstdint>
#include <map>
#include <random>

#include "state/dispatcher_state.h"
#include "tests/state/update_builders.h"

namespace dispatch::state::testing {

class UpdateGenerator {
 public:
  explicit UpdateGenerator(uint64_t seed);

  // A random update that `state.Check` accepts, for any state (ids, names and
  // request ids come from the state; the generator keeps only its clock, so
  // times grow when one generator drives one state).
  OwnedUpdate Next(const DispatcherState& state);

  // How many updates of each variant Next has produced.
  const std::map<journal::Update::Which, uint64_t>& counts() const { return counts_; }

 private:
  // Builds an update of `kind` into `out`; false when the state offers no
  // valid one of that kind right now.
  bool TryBuild(journal::Update::Which kind, const DispatcherState& state, OwnedUpdate& out);
  bool TryDataService(journal::Update::Which kind, const DispatcherState& state, OwnedUpdate& out);
  bool TryClosures(journal::Update::Which kind, const DispatcherState& state, OwnedUpdate& out);
  bool TryClosureBatch(const DispatcherState& state, OwnedUpdate& out);
  bool TryManyItemBatch(const DispatcherState& state, OwnedUpdate& out);
  // A batch of one: schedule (0), assign (1), finish (2), cancel (3) or
  // release (4) of a single closure.
  bool TryOneItemBatch(int item, const DispatcherState& state, OwnedUpdate& out);

  uint64_t Uniform(uint64_t n);  // in [0, n), n > 0
  bool OneIn(uint64_t n) { return Uniform(n) == 0; }
  template <typename T>
  const T& Pick(const std::vector<T>& items) {
    return items[Uniform(items.size())];
  }

  std::mt19937_64 rng_;
  int64_t now_micros_ = 1'000'000;
  bool fallback_ = false;         // building the always-possible update: ignore caps
  uint64_t next_request_id_ = 1;  // grows; skips ids the state still holds
  std::map<journal::Update::Which, uint64_t> counts_;
};

}  // namespace dispatch::state::testing
