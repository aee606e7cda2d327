#include "reactor/dataset_store.h"

namespace dispatch::reactor {

DatasetStore::DatasetStore(storage::Store& store, CommitPipeline& pipeline)
    : store_(store), pipeline_(pipeline) {
  // Committed: readable from the store now. Failed: gone.
  pipeline_.AddBatchListener([this]() { pending_.clear(); });
}

void DatasetStore::Put(std::string key, std::string definition) {
  pending_.insert_or_assign(key, definition);
  pipeline_.batch().PutDataset(std::move(key), std::move(definition));
}

Result<std::string> DatasetStore::Get(const std::string& key) {
  auto it = pending_.find(key);
  if (it != pending_.end()) return it->second;
  return store_.GetDataset(key);
}

}  // namespace dispatch::reactor
