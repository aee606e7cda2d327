// TablesReader: every dataset definition and closure result of a Store as
// they stood right after one commit, read on another thread than the loop's
// through its OWN read-only connection (no mutex, nothing shared with the
// Store). Pin() runs on the loop thread right after that commit and opens a
// read transaction (WAL mode: later commits of the loop stay invisible to
// it); ReadAll() then reads both tables inside that transaction, on one other
// thread, checks every row's CRC32C and ends the transaction. HA mode puts
// what it read into the snapshot it writes to etcd (the journal keys that
// carried those rows are deleted after it). A pinned reader holds the WAL
// back from restarting: pin only for as long as the read takes.
// Threading contract, as for the JournalReader: made on the loop thread by
// Store::NewTablesReader, used by one thread at a time, destroyed before the
// Store.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/journal_batch.h"
#include "storage/sqlite.h"

namespace dispatch::storage {

class TablesReader {
 public:
  static Result<std::unique_ptr<TablesReader>> Open(const std::string& db_path);
  TablesReader(const TablesReader&) = delete;
  TablesReader& operator=(const TablesReader&) = delete;

  // Opens the read transaction and returns the last journal record it sees
  // (the snapshot's seq when the journal holds none after it).
  // FailedPrecondition when already pinned.
  Result<uint64_t> Pin();
  bool pinned() const { return pinned_; }
  // Puts every dataset definition and every closure result of the pinned
  // transaction into `out` (PutDataset / PutResult), then ends it. DataLoss
  // naming the row when a checksum fails; FailedPrecondition when not pinned.
  Status ReadAll(JournalBatch* out);
  // Ends the read transaction without reading (the snapshot it was for
  // was given up). Idempotent.
  void Unpin();

 private:
  TablesReader(std::string db_path, SqliteDb db) : db_path_(std::move(db_path)), db_(std::move(db)) {}

  std::string db_path_;
  SqliteDb db_;
  bool pinned_ = false;
};

}  // namespace dispatch::storage
