#include "clients/builtin_dataset_kinds.h"

#include <cstring>
#include <fstream>

namespace dispatch::clients {
namespace {

// Elements [begin, end) of an integer sequence, rendered by `render`.
class CountingSource final : public ElementSource {
 public:
  using Render = void (*)(uint64_t index, uint64_t size, std::string* out);
  CountingSource(uint64_t begin, uint64_t end, uint64_t size, Render render)
      : next_(begin), end_(end), size_(size), render_(render) {}
  Result<bool> Next(std::string* element) override {
    if (next_ >= end_) return false;
    render_(next_++, size_, element);
    return true;
  }

 private:
  uint64_t next_;
  const uint64_t end_;
  const uint64_t size_;
  const Render render_;
};

void RenderDecimal(uint64_t index, uint64_t, std::string* out) { *out = std::to_string(index); }

void RenderSynthetic(uint64_t index, uint64_t size, std::string* out) {
  // resize() keeps the filler of the previous element when the caller reuses
  // `out`; only the index bytes change.
  out->resize(size, 'x');
  std::memcpy(out->data(), &index, std::min<uint64_t>(size, sizeof(index)));
}

class LinesSource final : public ElementSource {
 public:
  explicit LinesSource(std::string path) : path_(std::move(path)), in_(path_) {}
  Status status() const {
    return in_.is_open() ? Status::Ok() : NotFoundError("lines dataset: cannot open " + path_);
  }
  Result<bool> Next(std::string* element) override {
    if (std::getline(in_, *element)) return true;
    if (in_.bad()) return DataLossError("lines dataset: error reading " + path_);
    return false;
  }

 private:
  std::string path_;
  std::ifstream in_;
};

DatasetKindFactory CountingKind(CountingSource::Render render, bool sized) {
  return [render, sized](const KindDefinition& def,
                         const Shard& shard) -> Result<std::unique_ptr<ElementSource>> {
    Result<DatasetSpec> spec = BuiltinDatasetSpec(def);  // validates every argument
    if (!spec.ok()) return spec.status();
    const uint64_t count = *def.Uint("count", 0, 0, UINT64_MAX);
    const uint64_t splits = spec->num_splits;
    const uint64_t size = sized ? *def.Uint("size", 100, 0, UINT64_MAX) : 0;
    auto open_split = [count, splits, size,
                       render](const SplitItem& split) -> Result<std::unique_ptr<ElementSource>> {
      if (split.index >= splits) {
        return InvalidArgumentError("split " + std::to_string(split.index) + " of a dataset of " +
                                    std::to_string(splits) + " splits");
      }
      // 128-bit products: count * index may not fit in 64 bits.
      auto bound = [&](uint64_t i) {
        return static_cast<uint64_t>(static_cast<unsigned __int128>(count) * i / splits);
      };
      return std::unique_ptr<ElementSource>(
          new CountingSource(bound(split.index), bound(split.index + 1), size, render));
    };
    return std::unique_ptr<ElementSource>(
        new SplitChainSource(SplitsOfShard(shard, splits, {}), open_split));
  };
}

Result<std::unique_ptr<ElementSource>> OpenLines(const KindDefinition& def, const Shard& shard) {
  Result<DatasetSpec> spec = BuiltinDatasetSpec(def);
  if (!spec.ok()) return spec.status();
  auto open_split = [](const SplitItem& split) -> Result<std::unique_ptr<ElementSource>> {
    if (split.payload.empty()) return InvalidArgumentError("lines dataset: a split names no file");
    auto source = std::make_unique<LinesSource>(split.payload);
    DISPATCH_RETURN_IF_ERROR(source->status());
    return std::unique_ptr<ElementSource>(std::move(source));
  };
  return std::unique_ptr<ElementSource>(
      new SplitChainSource(SplitsOfShard(shard, 0, def.files), open_split));
}

}  // namespace

Status RegisterBuiltinDatasetKinds(DatasetKindRegistry& registry) {
  DISPATCH_RETURN_IF_ERROR(registry.Register("range", CountingKind(&RenderDecimal, false)));
  DISPATCH_RETURN_IF_ERROR(registry.Register("synthetic", CountingKind(&RenderSynthetic, true)));
  return registry.Register("lines", &OpenLines);
}

}  // namespace dispatch::clients
