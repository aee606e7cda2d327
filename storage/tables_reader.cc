#include "storage/tables_reader.h"

#include <algorithm>

#include "storage/format.h"

namespace dispatch::storage {

Result<std::unique_ptr<TablesReader>> TablesReader::Open(const std::string& db_path) {
  // NOMUTEX: one thread at a time uses this connection (the contract above).
  auto db = OpenSqlite(db_path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                       "tables reader connection to " + db_path);
  if (!db.ok()) return db.status();
  sqlite3_wal_autocheckpoint(db->get(), 0);
  return std::unique_ptr<TablesReader>(new TablesReader(db_path, std::move(db).value()));
}

Result<uint64_t> TablesReader::Pin() {
  if (pinned_) return FailedPreconditionError("the tables reader of " + db_path_ + " is already pinned");
  const std::string what = "pinning a read transaction on " + db_path_;
  DISPATCH_RETURN_IF_ERROR(ExecSql(db_.get(), "BEGIN", what));
  pinned_ = true;
  // A deferred transaction starts reading at its first SELECT: this one
  // fixes what every later read of it sees.
  auto last = QueryInt(db_.get(),
                       "SELECT max(coalesce((SELECT max(seq) FROM journal), 0), "
                       "coalesce((SELECT max(seq) FROM snapshot_file), 0))",
                       what);
  if (!last.ok()) {
    Unpin();
    return last.status();
  }
  return static_cast<uint64_t>(*last);
}

void TablesReader::Unpin() {
  if (!pinned_) return;
  pinned_ = false;
  // A read transaction has nothing to lose; its failure changes nothing.
  (void)ExecSql(db_.get(), "COMMIT", "ending the read transaction on " + db_path_);
}

Status TablesReader::ReadAll(JournalBatch* out) {
  if (!pinned_) return FailedPreconditionError("the tables reader of " + db_path_ + " is not pinned");
  struct Unpinner {
    TablesReader* self;
    ~Unpinner() { self->Unpin(); }
  } unpin{this};
  sqlite3* db = db_.get();
  {
    auto select = Statement::Prepare(db, "SELECT key, crc, body FROM dataset ORDER BY key");
    if (!select.ok()) return select.status();
    while (true) {
      const int rc = select->Step();
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return SqliteStatus(db, rc, "reading the dataset table of " + db_path_);
      const std::string_view key = select->ColumnBlob(0);
      const std::string_view body = select->ColumnBlob(2);
      if (select->ColumnInt(1) != static_cast<int64_t>(DatasetChecksum(key, body))) {
        return DataLossError("dataset " + QuoteKey(key) + " in " + db_path_ + " fails its checksum");
      }
      out->PutDataset(std::string(key), std::string(body));
    }
  }
  auto select = Statement::Prepare(db, "SELECT closure, crc, body FROM result ORDER BY closure");
  if (!select.ok()) return select.status();
  while (true) {
    const int rc = select->Step();
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return SqliteStatus(db, rc, "reading the result table of " + db_path_);
    const uint64_t id = static_cast<uint64_t>(select->ColumnInt(0));
    const std::string_view body = select->ColumnBlob(2);
    if (select->ColumnInt(1) != static_cast<int64_t>(ResultChecksum(id, body))) {
      return DataLossError("the result of closure " + std::to_string(id) + " in " + db_path_ +
                           " fails its checksum");
    }
    out->PutResult(id, std::string(body));
  }
  return Status::Ok();
}

}  // namespace dispatch::storage
