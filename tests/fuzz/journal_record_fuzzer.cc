// Fuzz target: one journal record (the bytes storage/ keeps) decoded and
// checked, then applied, on a small state (small_state.h). Properties:
//  - decoding never crashes or throws out (bad bytes are DataLoss);
//  - Check and Apply agree: Apply succeeds exactly when Check does;
//  - a refused record changes nothing (same Digest());
//  - an applied record leaves indexes that agree with the records, and a
//    state whose snapshot decodes back to the same digest (exact replay).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "state/codec.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/small_state.h"

namespace dispatch::fuzz {
namespace {

// What a refused record must leave as it was, cheap to compare on every
// input; the full Digest() is compared on one input in 16 (chosen by the
// input's bytes, so a reproduction does the same).
struct Summary {
  uint64_t values[14];
  bool operator==(const Summary&) const = default;
};

Summary Summarize(const state::DispatcherState& s) {
  return {{s.NumApplied(), static_cast<uint64_t>(s.LastTimeMicros()), s.NextDatasetId(),
           s.NextWorkerId(), s.NextJobId(), s.NextTaskId(), s.NextJobClientId(),
           s.NextClosureId(), s.NextResourceId(), s.NumDatasets(), s.NumWorkers(), s.NumJobs(),
           s.NumTasks(), s.NumJobClients() + s.NumCoordinators()}};
}

struct Base {
  state::DispatcherState state;
  uint64_t digest = 0;
  Summary summary;
  // Equal to `state` unless Apply changed it while refusing a record.
  state::DispatcherState scratch;
};

Base& SmallBase() {
  static Base* base = [] {
    auto* b = new Base;
    state::testing::UpdateGenerator generator(kSmallStateSeed);
    b->state = BuildSmallState(generator);
    b->digest = b->state.Digest();
    b->summary = Summarize(b->state);
    b->scratch = b->state;
    return b;
  }();
  return *base;
}

}  // namespace
}  // namespace dispatch::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dispatch;
  fuzz::Base& base = fuzz::SmallBase();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  const Status checked = state::CheckEncodedUpdate(base.state, bytes);
  if (!checked.ok()) {
    // Applied to the scratch copy: it must be refused and change nothing.
    const Status applied = state::ApplyEncodedUpdate(base.scratch, bytes);
    FUZZ_CHECK(!applied.ok(), "Check said '%s' but Apply accepted the record",
               checked.ToString().c_str());
    FUZZ_CHECK(fuzz::Summarize(base.scratch) == base.summary,
               "a refused record changed the state: %s", applied.ToString().c_str());
    uint32_t mix = 2166136261u;
    for (size_t i = 0; i < size; ++i) mix = (mix ^ data[i]) * 16777619u;
    if (mix % 16 == 0) {
      FUZZ_CHECK(base.scratch.Digest() == base.digest, "a refused record changed the state: %s",
                 applied.ToString().c_str());
    }
    return 0;
  }
  state::DispatcherState after = base.state;
  const Status applied = state::ApplyEncodedUpdate(after, bytes);
  FUZZ_CHECK(applied.ok(), "Check accepted the record but Apply said '%s'",
             applied.ToString().c_str());
  const Status indexes = after.CheckIndexes();
  FUZZ_CHECK(indexes.ok(), "indexes disagree after Apply: %s", indexes.ToString().c_str());
  Result<state::DispatcherState> restored = state::DecodeSnapshot(state::EncodeSnapshot(after));
  FUZZ_CHECK(restored.ok(), "the snapshot of an applied state does not load: %s",
             restored.status().ToString().c_str());
  FUZZ_CHECK(restored->Digest() == after.Digest(), "snapshot round trip changed the digest");
  return 0;
}
