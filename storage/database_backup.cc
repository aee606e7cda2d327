#include "storage/database_backup.h"

#include <fcntl.h>
#include <unistd.h>

namespace dispatch::storage {

Result<std::unique_ptr<DatabaseBackup>> DatabaseBackup::Start(sqlite3* source,
                                                              const std::string& source_path,
                                                              const std::string& dest_path) {
  if (access(dest_path.c_str(), F_OK) == 0) {
    return FailedPreconditionError("cannot copy " + source_path + " into " + dest_path +
                                   ": the file exists");
  }
  const std::string what = "the copy " + dest_path + " of " + source_path;
  auto dest = OpenSqlite(dest_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                         what);
  if (!dest.ok()) return dest.status();
  // A scratch file until the caller syncs and renames it: a rollback
  // journal or an fsync per step would only cost the loop.
  DISPATCH_RETURN_IF_ERROR(ExecSql(dest->get(), "PRAGMA journal_mode=OFF", what));
  DISPATCH_RETURN_IF_ERROR(ExecSql(dest->get(), "PRAGMA synchronous=OFF", what));
  // Pages the copy holds in memory before they go to the file: SQLite
  // writes what is cached in the step that completes the copy, so a big
  // cache makes that one step long (2 MiB, SQLite's default: up to 12 ms).
  DISPATCH_RETURN_IF_ERROR(ExecSql(dest->get(), "PRAGMA cache_size=-256", what));
  sqlite3_backup* backup = sqlite3_backup_init(dest->get(), "main", source, "main");
  if (backup == nullptr) {
    return SqliteStatus(dest->get(), sqlite3_errcode(dest->get()), "starting " + what);
  }
  // A descriptor of our own: SQLite's is not ours to use. Without one the
  // copy only loses the early write-back.
  const int writeback_fd = open(dest_path.c_str(), O_RDONLY | O_CLOEXEC);
  return std::unique_ptr<DatabaseBackup>(
      new DatabaseBackup(std::move(dest).value(), backup, source_path, dest_path, writeback_fd));
}

DatabaseBackup::~DatabaseBackup() {
  Finish();
  if (writeback_fd_ >= 0) close(writeback_fd_);
}

int DatabaseBackup::Finish() {
  if (backup_ == nullptr) return SQLITE_OK;
  const int rc = sqlite3_backup_finish(backup_);
  backup_ = nullptr;
  return rc;
}

Result<bool> DatabaseBackup::Step(int pages) {
  const int rc = sqlite3_backup_step(backup_, pages);
  page_count_ = sqlite3_backup_pagecount(backup_);
  remaining_ = sqlite3_backup_remaining(backup_);
  // Starts writing what the step left dirty; waits for nothing.
  if (writeback_fd_ >= 0) sync_file_range(writeback_fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
  if (rc == SQLITE_OK) return false;
  // The source was written to or checkpointed by another connection at that
  // instant: nothing was copied, the next step tries again.
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) {
    ++busy_steps_;
    return false;
  }
  const std::string what = "copying " + source_path_ + " into " + dest_path_;
  if (rc != SQLITE_DONE) {
    Finish();
    return SqliteStatus(dest_.get(), rc, what);
  }
  const int finished = Finish();
  if (finished != SQLITE_OK) return SqliteStatus(dest_.get(), finished, what);
  dest_.reset();
  return true;
}

}  // namespace dispatch::storage
