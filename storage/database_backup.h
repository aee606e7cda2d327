// DatabaseBackup: an online copy of the Store's database into a new file,
// made with SQLite's backup API on the Store's own connection, a bounded
// number of pages per Step(), so that the loop thread that owns the
// connection serves between steps. Because the source connection is the
// Store's, every transaction the Store commits while the copy runs is
// written into the copy as well (SQLite updates a backup of the connection
// that writes): when Step() says the copy is complete, it holds exactly the
// database as of the Store's last commit. A write to the source by another
// connection (a checkpointer restarting the WAL) makes SQLite start the copy
// over; the caller keeps those away while it steps.
// The copy is written with no journal and no fsync: it is a scratch file
// until the caller has synced it and given it its final name. Its write-back
// is started after every step (sync_file_range, no wait), so its dirty pages
// never pile up until the kernel throttles the writer, the loop thread.
// REQUIRES: the thread of the Store's connection; destroyed before the Store.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "storage/sqlite.h"

namespace dispatch::storage {

class DatabaseBackup {
 public:
  // Starts a copy of `source` (the connection to `source_path`, named in
  // errors) into a new database file at `dest_path`, which must not exist
  // (FailedPrecondition). Unavailable naming the file when it cannot be
  // created.
  static Result<std::unique_ptr<DatabaseBackup>> Start(sqlite3* source,
                                                       const std::string& source_path,
                                                       const std::string& dest_path);
  // Ends the copy where it is (sqlite3_backup_finish) and closes the file;
  // an incomplete file is the caller's to remove.
  ~DatabaseBackup();
  DatabaseBackup(const DatabaseBackup&) = delete;
  DatabaseBackup& operator=(const DatabaseBackup&) = delete;

  // Copies at most `pages` more pages. True once the copy is complete (the
  // file is then closed; Step must not be called again); false while pages
  // remain, or when the source was busy (try again on a later turn). A
  // failure (the copy's disk full, an I/O error) names the file; the copy
  // is then abandoned and the source is not affected.
  Result<bool> Step(int pages);

  // Pages of the source, and of those still to copy, as of the last Step.
  int page_count() const { return page_count_; }
  int remaining() const { return remaining_; }
  // Times SQLite found the source busy or locked and the step copied nothing.
  uint64_t busy_steps() const { return busy_steps_; }
  const std::string& dest_path() const { return dest_path_; }

 private:
  DatabaseBackup(SqliteDb dest, sqlite3_backup* backup, std::string source_path,
                 std::string dest_path, int writeback_fd)
      : dest_(std::move(dest)),
        backup_(backup),
        source_path_(std::move(source_path)),
        dest_path_(std::move(dest_path)),
        writeback_fd_(writeback_fd) {}
  // sqlite3_backup_finish, once; its result code.
  int Finish();

  SqliteDb dest_;
  sqlite3_backup* backup_;  // null once finished
  const std::string source_path_;
  const std::string dest_path_;
  int writeback_fd_;  // the copy, read-only: to start its write-back; -1: none
  int page_count_ = 0;
  int remaining_ = 0;
  uint64_t busy_steps_ = 0;
};

}  // namespace dispatch::storage
