// DatasetStore: dataset definitions, stored in the same transaction as the
// record registering them and readable at once: this pass's puts first
// (not committed yet, but the update naming them is applied), then the
// journal's store.
// REQUIRES: loop thread only.
#pragma once

#include <map>
#include <string>

#include "common/status.h"
#include "reactor/commit_pipeline.h"
#include "storage/store.h"

namespace dispatch::reactor {

class DatasetStore {
 public:
  DatasetStore(storage::Store& store, CommitPipeline& pipeline);
  DatasetStore(const DatasetStore&) = delete;
  DatasetStore& operator=(const DatasetStore&) = delete;

  // Stores `definition` under `key` with the pass's updates. REQUIRES: the
  // update naming it was just submitted (so nothing commits between them)
  // and the caller checked its size (max_dataset_bytes) and made room for
  // it (CommitPipeline::MakeRoom): the store refusing it at commit is a bug.
  void Put(std::string key, std::string definition);
  // The definition stored under `key`.
  Result<std::string> Get(const std::string& key);

 private:
  storage::Store& store_;
  CommitPipeline& pipeline_;
  // Definitions put in this pass, readable before their commit.
  std::map<std::string, std::string> pending_;
};

}  // namespace dispatch::reactor
