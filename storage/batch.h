// One group commit: the journal records produced during one loop pass plus the
// dataset definitions those records register. Store::Commit writes a Batch in
// one SQLite transaction: all of it is durable, or none of it is. Records and
// definitions are opaque bytes to storage; the Batch owns copies of them.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace dispatch::storage {

// A dataset definition stored under `key`; a later put of the same key replaces it.
struct DatasetPut {
  std::string key;
  std::string definition;
};

class Batch {
 public:
  Batch() = default;
  Batch(Batch&&) = default;
  Batch& operator=(Batch&&) = default;
  // Copying a batch of encoded Updates is never what the reactor means.
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

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

  const std::vector<std::string>& records() const { return records_; }
  const std::vector<DatasetPut>& dataset_puts() const { return dataset_puts_; }
  // Number of journal records (dataset puts do not take sequence numbers).
  size_t record_count() const { return records_.size(); }
  // Total payload bytes, records and definitions.
  size_t payload_bytes() const { return record_bytes_; }
  bool empty() const { return records_.empty() && dataset_puts_.empty(); }

  // Empties the batch but keeps its capacity for the next loop pass.
  void Clear() {
    records_.clear();
    dataset_puts_.clear();
    record_bytes_ = 0;
  }

 private:
  std::vector<std::string> records_;
  std::vector<DatasetPut> dataset_puts_;
  size_t record_bytes_ = 0;
};

}  // namespace dispatch::storage
