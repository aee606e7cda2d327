// Fuzz target: a snapshot body (what start-up loads before replaying the
// journal tail) decoded by DecodeSnapshot. Properties: no crash, no throw;
// bad bytes are refused (DataLoss); a snapshot that loads has indexes that
// agree with its records, encodes and loads again to the same digest, and
// accepts the journal records that follow (a generated update applies).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "state/codec.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/state/update_generator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dispatch;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<state::DispatcherState> loaded = state::DecodeSnapshot(bytes);
  if (!loaded.ok()) {
    FUZZ_CHECK(loaded.status().code() == StatusCode::kDataLoss,
               "a bad snapshot was refused without DataLoss: %s",
               loaded.status().ToString().c_str());
    return 0;
  }
  const Status indexes = loaded->CheckIndexes();
  FUZZ_CHECK(indexes.ok(), "a loaded snapshot has inconsistent indexes: %s",
             indexes.ToString().c_str());
  Result<state::DispatcherState> again = state::DecodeSnapshot(state::EncodeSnapshot(*loaded));
  FUZZ_CHECK(again.ok(), "a loaded snapshot does not load again: %s",
             again.status().ToString().c_str());
  FUZZ_CHECK(again->Digest() == loaded->Digest(), "snapshot round trip changed the digest");
  // The state must go on working: a few updates valid for it apply.
  state::testing::UpdateGenerator generator(size);
  for (int i = 0; i < 3; ++i) {
    state::testing::OwnedUpdate update = generator.Next(*loaded);
    const Status applied = loaded->Apply(update.reader());
    // A snapshot whose next-id counter is at the top has used up that id
    // space (ids stop at 2^64-2): the one refusal such a state may give.
    if (!applied.ok() && applied.code() == StatusCode::kInvalidArgument &&
        applied.message().find("would wrap to 0") != std::string::npos) {
      break;
    }
    FUZZ_CHECK(applied.ok(), "an update generated for a loaded snapshot was refused: %s",
               applied.ToString().c_str());
  }
  return 0;
}
