// JournalBatch: one group commit, the journal records produced during one
// loop pass plus the dataset definitions those records register and the
// closure results they finish or release. A journal writes it in one
// transaction (storage::Store: one SQLite transaction; HA mode: one pass of
// an etcd journal group): all of it is durable, or none of it is. Records
// and definitions are opaque bytes to the journal; the batch owns copies.
// Here, below storage/, because the HA wire format carries it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dispatch {

// A dataset definition stored under `key`; a later put of the same key replaces it.
struct DatasetPut {
  std::string key;
  std::string definition;
};

// A closure result stored under the closure's id.
struct ResultPut {
  uint64_t closure_id = 0;
  std::string bytes;
};

class JournalBatch {
 public:
  JournalBatch() = default;
  JournalBatch(JournalBatch&&) = default;
  JournalBatch& operator=(JournalBatch&&) = default;
  // Copying a batch of encoded Updates is never what the reactor means.
  JournalBatch(const JournalBatch&) = delete;
  JournalBatch& operator=(const JournalBatch&) = delete;

  // Appends one journal record; it gets the next sequence number at commit.
  void AddRecord(std::string bytes) {
    record_bytes_ += bytes.size();
    records_.push_back(std::move(bytes));
  }
  // Stores `definition` under `key` in the same transaction as the records.
  void PutDataset(std::string key, std::string definition) {
    record_bytes_ += definition.size();
    dataset_puts_.push_back({std::move(key), std::move(definition)});
  }

  // Stores a closure result under its closure id (replacing any row of that
  // id) in the same transaction as the records.
  void PutResult(uint64_t closure_id, std::string bytes) {
    record_bytes_ += bytes.size();
    result_puts_.push_back({closure_id, std::move(bytes)});
  }
  // Deletes the stored result of a closure (none: nothing happens), after
  // every put of the batch.
  void DeleteResult(uint64_t closure_id) { result_deletes_.push_back(closure_id); }

  const std::vector<std::string>& records() const { return records_; }
  const std::vector<DatasetPut>& dataset_puts() const { return dataset_puts_; }
  const std::vector<ResultPut>& result_puts() const { return result_puts_; }
  const std::vector<uint64_t>& result_deletes() const { return result_deletes_; }
  // Number of journal records (dataset puts do not take sequence numbers).
  size_t record_count() const { return records_.size(); }
  // Total payload bytes: records, definitions and results.
  size_t payload_bytes() const { return record_bytes_; }
  bool empty() const {
    return records_.empty() && dataset_puts_.empty() && result_puts_.empty() &&
           result_deletes_.empty();
  }

  // Empties the batch but keeps its capacity for the next loop pass.
  void Clear() {
    records_.clear();
    dataset_puts_.clear();
    result_puts_.clear();
    result_deletes_.clear();
    record_bytes_ = 0;
  }

 private:
  std::vector<std::string> records_;
  std::vector<DatasetPut> dataset_puts_;
  std::vector<ResultPut> result_puts_;
  std::vector<uint64_t> result_deletes_;
  size_t record_bytes_ = 0;
};

}  // namespace dispatch
