#include "storage/checkpointer.h"

#include <utility>

namespace dispatch::storage {
namespace {

constexpr int kMaxPasses = 4;

}  // namespace

Result<std::unique_ptr<Checkpointer>> Checkpointer::Open(const std::string& db_path,
                                                         bool synchronous_full) {
  // NOMUTEX: SQLite's multi-thread mode; this connection is used by one thread
  // at a time (the contract above), so it needs no lock of its own.
  auto db = OpenSqlite(db_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                       "checkpointer connection to " + db_path);
  if (!db.ok()) return db.status();
  sqlite3* raw = db->get();
  // This connection never commits, but it must never checkpoint on its own either.
  sqlite3_wal_autocheckpoint(raw, 0);
  DISPATCH_RETURN_IF_ERROR(
      ExecSql(raw, synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
              "setting synchronous on the checkpointer connection to " + db_path));
  // Read the schema once, here on the loop thread, so the connection has the
  // WAL open before its first checkpoint.
  auto tables = QueryInt(raw, "SELECT count(*) FROM sqlite_schema",
                         "reading the schema on the checkpointer connection to " + db_path);
  if (!tables.ok()) return tables.status();
  return std::unique_ptr<Checkpointer>(new Checkpointer(db_path, std::move(db).value()));
}

Result<CheckpointStats> Checkpointer::Checkpoint() {
  CheckpointStats stats;
  int previous = -1;
  while (stats.passes < kMaxPasses) {
    int log = 0;
    int done = 0;
    const int rc =
        sqlite3_wal_checkpoint_v2(db_.get(), "main", SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    ++stats.passes;
    if (rc == SQLITE_BUSY) {  // another checkpointer holds it: try again later
      stats.busy = true;
      break;
    }
    if (rc != SQLITE_OK) return SqliteStatus(db_.get(), rc, "checkpointing " + db_path_);
    stats.wal_frames = log;
    stats.checkpointed_frames = done;
    // Commits made while we copied add frames; a second pass copies that tail,
    // which is what lets the writer restart the WAL under steady load.
    if (stats.complete() || done == previous) break;
    previous = done;
  }
  return stats;
}

}  // namespace dispatch::storage
