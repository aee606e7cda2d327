#include "clients/dataset_kind.h"

namespace dispatch::clients {

Shard Shard::OfSplit(SplitItem split) {
  Shard s;
  s.kind = Kind::kSplit;
  s.split = std::move(split);
  return s;
}

Shard Shard::Static(int64_t worker_index, uint32_t num_workers) {
  Shard s;
  s.kind = Kind::kStatic;
  s.worker_index = worker_index;
  s.num_workers = num_workers == 0 ? 1 : num_workers;
  return s;
}

bool Shard::Contains(uint64_t index) const {
  switch (kind) {
    case Kind::kEverything:
      return true;
    case Kind::kSplit:
      return index == split.index;
    case Kind::kStatic:
      return worker_index >= 0 && index % num_workers == static_cast<uint64_t>(worker_index);
  }
  return false;
}

Status DatasetKindRegistry::Register(const std::string& kind, DatasetKindFactory factory) {
  if (kind.empty()) return InvalidArgumentError("a dataset kind needs a name");
  if (!factories_.emplace(kind, std::move(factory)).second) {
    return AlreadyExistsError("dataset kind " + kind + " is registered already");
  }
  return Status::Ok();
}

Result<std::unique_ptr<ElementSource>> DatasetKindRegistry::Open(const std::string& definition,
                                                                 const Shard& shard) const {
  Result<KindDefinition> parsed = ParseKindDefinition(definition);
  if (!parsed.ok()) return parsed.status();
  auto it = factories_.find(parsed->kind);
  if (it == factories_.end()) {
    return NotFoundError("this worker has no dataset kind '" + parsed->kind + "'");
  }
  return it->second(*parsed, shard);
}

std::vector<std::string> DatasetKindRegistry::kinds() const {
  std::vector<std::string> out;
  for (const auto& [kind, factory] : factories_) out.push_back(kind);
  return out;
}

Result<bool> SplitChainSource::Next(std::string* element) {
  while (true) {
    if (current_ != nullptr) {
      Result<bool> more = current_->Next(element);
      if (!more.ok() || *more) return more;
      current_.reset();
    }
    if (next_split_ >= splits_.size()) return false;
    Result<std::unique_ptr<ElementSource>> opened = open_split_(splits_[next_split_++]);
    if (!opened.ok()) return opened.status();
    current_ = std::move(opened).value();
  }
}

std::vector<SplitItem> SplitsOfShard(const Shard& shard, uint64_t num_splits,
                                     const std::vector<std::string>& payloads) {
  if (shard.kind == Shard::Kind::kSplit) return {shard.split};
  const uint64_t n = payloads.empty() ? num_splits : payloads.size();
  std::vector<SplitItem> out;
  for (uint64_t i = 0; i < n; ++i) {
    if (!shard.Contains(i)) continue;
    out.push_back(SplitItem{i, payloads.empty() ? std::string() : payloads[i]});
  }
  return out;
}

}  // namespace dispatch::clients
