#include "storage/checkpointer.h"

#include <utility>

#include "storage/format.h"

namespace dispatch::storage {
namespace {

constexpr int kMaxPasses = 4;

}  // namespace

Result<std::unique_ptr<Checkpointer>> Checkpointer::Open(const std::string& db_path,
                                                         uint64_t wal_size_limit_bytes) {
  // NOMUTEX: SQLite's multi-thread mode; this connection is used by one thread
  // at a time (the contract above), so it needs no lock of its own.
  auto db = OpenSqlite(db_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                       "checkpointer connection to " + db_path);
  if (!db.ok()) return db.status();
  sqlite3* raw = db->get();
  // Its one commit (RestartWal) must not checkpoint by itself either; the
  // hook that replaces SQLite's automatic one only counts frames.
  sqlite3_wal_autocheckpoint(raw, 0);
  // NORMAL whatever the Store's level: a checkpoint syncs the WAL and the
  // database at NORMAL exactly as at FULL, and RestartWal's commit needs no
  // sync of its own (it rewrites a value the database has; SQLite syncs the
  // restarted WAL's header at any level but OFF).
  DISPATCH_RETURN_IF_ERROR(ExecSql(raw, "PRAGMA synchronous=NORMAL",
                                   "setting synchronous on the checkpointer connection to " + db_path));
  // A restart here is where SQLite trims the WAL file, as the Store's own
  // connection would.
  const std::string limit = "PRAGMA journal_size_limit=" + std::to_string(wal_size_limit_bytes);
  DISPATCH_RETURN_IF_ERROR(
      ExecSql(raw, limit.c_str(), "setting journal_size_limit on the checkpointer connection to " + db_path));
  // Read the schema once, here on the loop thread, so the connection has the
  // WAL open before its first checkpoint.
  auto tables = QueryInt(raw, "SELECT count(*) FROM sqlite_schema",
                         "reading the schema on the checkpointer connection to " + db_path);
  if (!tables.ok()) return tables.status();
  auto checkpointer =
      std::unique_ptr<Checkpointer>(new Checkpointer(db_path, std::move(db).value()));
  sqlite3_wal_hook(raw, &Checkpointer::OnWalCommit, checkpointer.get());
  return checkpointer;
}

int Checkpointer::OnWalCommit(void* self, sqlite3* /*db*/, const char* /*name*/, int frames) {
  static_cast<Checkpointer*>(self)->committed_frames_ = frames;
  return SQLITE_OK;
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

Result<CheckpointStats> Checkpointer::RestartWal(const CheckpointStats& done) {
  CheckpointStats stats = done;
  stats.restarted_wal = false;
  if (!done.complete() || done.wal_frames == 0) return stats;
  // IMMEDIATE takes the write lock now or fails at once (no busy timeout on
  // this connection): a commit of the loop's got in, which leaves the WAL as
  // it is and the restart to a later checkpoint.
  int rc = sqlite3_exec(db_.get(), "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  if (rc == SQLITE_BUSY) return stats;
  if (rc != SQLITE_OK) return SqliteStatus(db_.get(), rc, "restarting the WAL of " + db_path_);
  const std::string rewrite = "PRAGMA user_version=" + std::to_string(kFormatVersion);
  rc = sqlite3_exec(db_.get(), rewrite.c_str(), nullptr, nullptr, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_exec(db_.get(), "COMMIT", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    Status failed = SqliteStatus(db_.get(), rc, "restarting the WAL of " + db_path_);
    sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    return failed;
  }
  // The write is the WAL's only frame when SQLite restarted it for this
  // transaction; otherwise it went after the frames already there, and the
  // Store's next commit reports the WAL's length.
  if (committed_frames_ != 1) return stats;
  stats.restarted_wal = true;
  stats.wal_frames = 1;
  stats.checkpointed_frames = 0;
  return stats;
}

}  // namespace dispatch::storage
