// JournalWriter: what the commit pipeline needs of a journal: write one
// group commit in one transaction, and say where the journal ends. The
// Store is the dispatcher's; the simulation keeps its journal in memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "common/journal_batch.h"

namespace dispatch::storage {

class JournalWriter {
 public:
  virtual ~JournalWriter() = default;

  // Writes the batch in one transaction (all of it or none) and returns the
  // sequence number of its last record (last_seq() for a batch without
  // records). A refusal of the batch as input (an oversized record) writes
  // nothing and leaves the writer usable; any other failure makes it
  // failed() for good.
  virtual Result<uint64_t> Commit(const JournalBatch& batch) = 0;
  // The last record's sequence number (0: none ever).
  virtual uint64_t last_seq() const = 0;
  // True once a write failed: nothing more is accepted.
  virtual bool failed() const = 0;
  // The largest journal record accepted.
  virtual size_t max_record_bytes() const = 0;
};

}  // namespace dispatch::storage
