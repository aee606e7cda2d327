// Fuzz target: one etcd journal value (reactor/ha/wire/journal_group_codec.h), as
// a standby reads it from etcd's watch or a range. The first byte chooses
// how the rest is taken: as the whole value (CRC32C included: damage must be
// refused), or as a body whose CRC32C is computed here, so that mutations
// reach past the CRC into gzip's inflate and Cap'n Proto's unpacking, as a
// writer with a bug would. Properties:
//  - decoding never crashes or throws out (bad bytes are DataLoss naming the
//    key);
//  - a value that decodes encodes again to one that decodes to the same
//    passes (records, dataset puts, result puts and deletes), in order.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "reactor/ha/wire/journal_group_codec.h"
#include "reactor/ha/wire/pass_codec.h"
#include "tests/fuzz/fuzz_check.h"

namespace dispatch::fuzz {
namespace {

bool SamePass(const JournalBatch& a, const JournalBatch& b) {
  if (a.records() != b.records() || a.result_deletes() != b.result_deletes()) return false;
  if (a.dataset_puts().size() != b.dataset_puts().size() || a.result_puts().size() != b.result_puts().size()) {
    return false;
  }
  for (size_t i = 0; i < a.dataset_puts().size(); ++i) {
    if (a.dataset_puts()[i].key != b.dataset_puts()[i].key ||
        a.dataset_puts()[i].definition != b.dataset_puts()[i].definition) {
      return false;
    }
  }
  for (size_t i = 0; i < a.result_puts().size(); ++i) {
    if (a.result_puts()[i].closure_id != b.result_puts()[i].closure_id ||
        a.result_puts()[i].bytes != b.result_puts()[i].bytes) {
      return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace dispatch::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dispatch;
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string value = (data[0] & 1) == 0 ? std::string(rest) : ha::WithCrc32c(rest);
  const std::string key = "/p/journal/00000000000000000001";
  Result<ha::DecodedGroup> decoded = ha::DecodeJournalGroup(value, key);
  if (!decoded.ok()) {
    FUZZ_CHECK(decoded.status().code() == StatusCode::kDataLoss, "%s", decoded.status().ToString().c_str());
    FUZZ_CHECK(decoded.status().message().find(key) != std::string::npos, "%s",
               decoded.status().ToString().c_str());
    return 0;
  }
  std::vector<const JournalBatch*> passes;
  uint64_t records = 0;
  for (const JournalBatch& pass : decoded->passes) {
    passes.push_back(&pass);
    records += pass.record_count();
  }
  FUZZ_CHECK(records == decoded->record_count, "%llu records counted, %llu held",
             static_cast<unsigned long long>(decoded->record_count), static_cast<unsigned long long>(records));
  const std::string again = ha::EncodeJournalGroup(decoded->first_seq, passes);
  Result<ha::DecodedGroup> round = ha::DecodeJournalGroup(again, key);
  FUZZ_CHECK(round.ok(), "a re-encoded group does not decode: %s", round.status().ToString().c_str());
  FUZZ_CHECK(round->first_seq == decoded->first_seq, "first_seq changed");
  FUZZ_CHECK(round->passes.size() == decoded->passes.size(), "pass count changed");
  for (size_t i = 0; i < round->passes.size(); ++i) {
    FUZZ_CHECK(fuzz::SamePass(round->passes[i], decoded->passes[i]), "pass %zu changed", i);
  }
  return 0;
}
