// Fuzz target: dataset definition bytes as a worker receives them from the
// dispatcher (getDatasetDef) and dispatchctl writes them: ParseKindDefinition,
// the validation of the built-in kinds (BuiltinDatasetSpec), and opening the
// range and synthetic kinds the way dispatch-worker does, reading a few
// elements. Properties: no crash; a parsed definition formats and parses back
// to itself; an open that BuiltinDatasetSpec refused is refused too.
// "lines" is validated but not opened: its files are paths on this machine.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "clients/builtin_dataset_kinds.h"
#include "clients/dataset_definition.h"
#include "clients/dataset_kind.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

const dispatch::clients::DatasetKindRegistry& Registry() {
  static const auto* registry = [] {
    auto* r = new dispatch::clients::DatasetKindRegistry;
    FUZZ_CHECK(dispatch::clients::RegisterBuiltinDatasetKinds(*r).ok(), "builtin kinds");
    return r;
  }();
  return *registry;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dispatch;
  using namespace dispatch::clients;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Result<KindDefinition> parsed = ParseKindDefinition(bytes);
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == StatusCode::kInvalidArgument, "%s",
               parsed.status().ToString().c_str());
    return 0;
  }
  const std::string formatted = FormatKindDefinition(*parsed);
  Result<KindDefinition> reparsed = ParseKindDefinition(formatted);
  FUZZ_CHECK(reparsed.ok(), "a formatted definition does not parse: %s",
             reparsed.status().ToString().c_str());
  FUZZ_CHECK(reparsed->kind == parsed->kind && reparsed->args == parsed->args &&
                 reparsed->files == parsed->files,
             "format/parse round trip changed the definition");

  Result<DatasetSpec> spec = BuiltinDatasetSpec(*parsed);
  if (parsed->kind != "range" && parsed->kind != "synthetic") return 0;
  // Opened only with small elements and split lists. The large ones (64 MiB
  // elements, 2^20 splits) are valid and run the same code, but under ASan
  // each took milliseconds: the corpus filled with them and a 10^7-run
  // campaign fell from ~20,000 to ~500 inputs/s.
  if (spec.ok()) {
    Result<uint64_t> element_bytes = parsed->Uint("size", 100, 0, UINT64_MAX);
    if (!element_bytes.ok() || *element_bytes > (64u << 10) || spec->num_splits > 4096) return 0;
  }
  for (const Shard& shard : {Shard::Everything(), Shard::Static(1, 3)}) {
    Result<std::unique_ptr<ElementSource>> source = Registry().Open(bytes, shard);
    if (!spec.ok()) {
      FUZZ_CHECK(!source.ok(), "Open accepted a definition BuiltinDatasetSpec refused: %s",
                 spec.status().ToString().c_str());
      continue;
    }
    if (!source.ok()) continue;
    std::string element;
    for (int i = 0; i < 4; ++i) {
      Result<bool> more = (*source)->Next(&element);
      if (!more.ok() || !*more) break;
    }
  }
  return 0;
}
