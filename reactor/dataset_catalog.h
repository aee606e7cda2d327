// DatasetCatalog: what the reactor derives from a registered dataset and keeps
// beside the state: the definition's 64-bit fingerprint, the metadata bytes
// journaled in RegisterDataset (a flat rpc::DatasetMetadata: split source and
// the caller's metadata), and a cache of decoded split sources for getSplit.
// A dataset never changes once registered, so cached entries never go stale.
// REQUIRES: loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "schema/dispatcher.capnp.h"
#include "state/dispatcher_state.h"

namespace dispatch::reactor {

// A 64-bit hash of the definition bytes. Equal bytes, equal fingerprints;
// registration confirms a match byte for byte, so a collision costs a probe,
// never a wrong dataset.
uint64_t FingerprintOf(std::string_view bytes);

// The dataset store's key of a definition.
std::string DefinitionKey(uint64_t dataset_id, uint64_t fingerprint);

// Encodes the split source and the caller's metadata for the journal.
std::string EncodeDatasetMetadata(rpc::SplitSource::Reader split_source,
                                  capnp::Data::Reader user_metadata);

// Decodes journaled metadata bytes (checked: bounds, nesting) and hands the
// reader to `use` while it is valid. DataLoss when they do not decode.
Status WithDatasetMetadata(const std::string& bytes,
                           const std::function<void(rpc::DatasetMetadata::Reader)>& use);

// The split source of one dataset, decoded.
struct SplitSourceInfo {
  enum class Kind { kNone, kIndexed, kExplicit };
  Kind kind = Kind::kNone;
  uint64_t num_splits = 0;
  std::vector<std::string> payloads;  // kExplicit only: split i is payloads[i]
};

class DatasetCatalog {
 public:
  explicit DatasetCatalog(const state::DispatcherState& state) : state_(state) {}

  // The dataset's split source; NotFound for an unknown dataset, DataLoss for
  // metadata this code did not write.
  Result<const SplitSourceInfo*> SplitSource(uint64_t dataset_id);

 private:
  const state::DispatcherState& state_;
  std::map<uint64_t, SplitSourceInfo> cache_;
};

}  // namespace dispatch::reactor
