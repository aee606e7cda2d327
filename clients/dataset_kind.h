// Dataset kinds: how a worker turns a dataset definition into elements. An
// embedding program registers one factory per kind; given the definition and
// a shard (one DYNAMIC split, a static shard, or everything for OFF) it
// yields an ElementSource. Sources run on the agent thread and must not block
// for long: the producer pulls one element at a time and yields in between.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "clients/dataset_definition.h"
#include "clients/task_handler.h"
#include "common/status.h"

namespace dispatch::clients {

// What part of a dataset one producer reads.
struct Shard {
  enum class Kind { kEverything, kSplit, kStatic };
  Kind kind = Kind::kEverything;
  SplitItem split;           // kSplit
  int64_t worker_index = 0;  // kStatic: this worker's place in the configured list
  uint32_t num_workers = 1;  // kStatic

  static Shard Everything() { return Shard(); }
  static Shard OfSplit(SplitItem split);
  static Shard Static(int64_t worker_index, uint32_t num_workers);
  // Whether split `index` belongs to this shard (every split for kEverything,
  // the one for kSplit, index % num_workers == worker_index for kStatic).
  bool Contains(uint64_t index) const;
};

class ElementSource {
 public:
  virtual ~ElementSource() = default;
  // The next element into `element`; false at the end. An error ends the task.
  // `element` may hold the bytes of an earlier element (producers reuse the
  // buffers of acknowledged elements): assign or resize it, never append.
  virtual Result<bool> Next(std::string* element) = 0;
};

using DatasetKindFactory = std::function<Result<std::unique_ptr<ElementSource>>(
    const KindDefinition& definition, const Shard& shard)>;

class DatasetKindRegistry {
 public:
  // AlreadyExists when `kind` has a factory.
  Status Register(const std::string& kind, DatasetKindFactory factory);
  // Parses `definition` and opens its kind's source for `shard`; NotFound for
  // a kind nobody registered, InvalidArgument for a bad definition.
  Result<std::unique_ptr<ElementSource>> Open(const std::string& definition,
                                              const Shard& shard) const;
  std::vector<std::string> kinds() const;

 private:
  std::map<std::string, DatasetKindFactory> factories_;
};

// A source over several splits in order, opening each with `open_split` (for
// kinds whose static and OFF shards are a list of splits).
class SplitChainSource final : public ElementSource {
 public:
  using OpenSplit = std::function<Result<std::unique_ptr<ElementSource>>(const SplitItem&)>;
  SplitChainSource(std::vector<SplitItem> splits, OpenSplit open_split)
      : splits_(std::move(splits)), open_split_(std::move(open_split)) {}
  Result<bool> Next(std::string* element) override;

 private:
  std::vector<SplitItem> splits_;
  OpenSplit open_split_;
  size_t next_split_ = 0;
  std::unique_ptr<ElementSource> current_;
};

// The splits of `shard` among `payloads.size()` explicit splits, or among
// `num_splits` indexed ones when `payloads` is empty.
std::vector<SplitItem> SplitsOfShard(const Shard& shard, uint64_t num_splits,
                                     const std::vector<std::string>& payloads);

}  // namespace dispatch::clients
