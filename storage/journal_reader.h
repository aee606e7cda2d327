// JournalReader: reads committed journal records on another thread than the
// loop's, through its OWN read-only sqlite3 connection (nothing shared with
// the Store, no mutex). WAL mode lets it read while the loop commits. The
// reactor's snapshot replica uses it to catch up with the journal off the loop.
// Threading contract, as for the Checkpointer: made by Store::NewJournalReader
// on the loop thread; used by one thread at a time (a thread-pool task, then
// the loop after it); destroyed on the loop thread before the Store.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "storage/sqlite.h"

namespace dispatch::storage {

class JournalReader {
 public:
  static Result<std::unique_ptr<JournalReader>> Open(const std::string& db_path);

  JournalReader(const JournalReader&) = delete;
  JournalReader& operator=(const JournalReader&) = delete;

  // Calls `fn` for every record after_seq+1 .. through_seq, in order, reading
  // in short read transactions (so checkpoints are not held back for long).
  // A missing record (truncated, or not committed yet) or a failed checksum is
  // DataLoss naming it; an error from `fn` stops the read and is returned.
  Status Read(uint64_t after_seq, uint64_t through_seq,
              const std::function<Status(uint64_t seq, std::string_view bytes)>& fn);

 private:
  JournalReader(std::string db_path, SqliteDb db, Statement select)
      : db_path_(std::move(db_path)), db_(std::move(db)), select_(std::move(select)) {}

  std::string db_path_;
  SqliteDb db_;
  Statement select_;  // after db_: finalized first
};

}  // namespace dispatch::storage
