#include "storage/journal_reader.h"

#include <algorithm>
#include <utility>

#include "storage/format.h"

namespace dispatch::storage {
namespace {

// Records per read transaction.
constexpr uint64_t kChunk = 4096;

}  // namespace

Result<std::unique_ptr<JournalReader>> JournalReader::Open(const std::string& db_path) {
  // NOMUTEX: one thread at a time uses this connection (the contract above).
  auto db = OpenSqlite(db_path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                       "journal reader connection to " + db_path);
  if (!db.ok()) return db.status();
  sqlite3_wal_autocheckpoint(db->get(), 0);
  auto select = Statement::Prepare(
      db->get(), "SELECT seq, crc, body FROM journal WHERE seq > ?1 AND seq <= ?2 ORDER BY seq");
  if (!select.ok()) return select.status();
  return std::unique_ptr<JournalReader>(
      new JournalReader(db_path, std::move(db).value(), std::move(select).value()));
}

Status JournalReader::Read(uint64_t after_seq, uint64_t through_seq,
                           const std::function<Status(uint64_t, std::string_view)>& fn) {
  uint64_t expected = after_seq + 1;
  while (expected <= through_seq) {
    const uint64_t last = std::min(through_seq, expected - 1 + kChunk);
    ScopedReset reset(select_);  // ends the read transaction of this chunk
    select_.BindInt(1, static_cast<int64_t>(expected - 1));
    select_.BindInt(2, static_cast<int64_t>(last));
    while (true) {
      const int rc = select_.Step();
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) {
        return SqliteStatus(db_.get(), rc,
                            "reading journal record " + std::to_string(expected) + " of " + db_path_);
      }
      const uint64_t seq = static_cast<uint64_t>(select_.ColumnInt(0));
      if (seq != expected) break;  // reported below
      const std::string_view body = select_.ColumnBlob(2);
      if (select_.ColumnInt(1) != static_cast<int64_t>(RecordChecksum(seq, body))) {
        return DataLossError("journal record " + std::to_string(seq) + " in " + db_path_ +
                             " fails its checksum: the record is damaged");
      }
      DISPATCH_RETURN_IF_ERROR(fn(seq, body));
      ++expected;
    }
    if (expected <= last) {
      return DataLossError("journal record " + std::to_string(expected) + " of " + db_path_ +
                           " is not there for the journal reader");
    }
  }
  return Status::Ok();
}

}  // namespace dispatch::storage
