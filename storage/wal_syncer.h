// WalSyncer: makes the journal's written transactions durable without the
// loop thread waiting. With StoreOptions.defer_sync the Store's connection
// commits into the WAL (the OS page cache) without an fsync; a WalSyncer,
// holding its own handle of the same WAL file, then syncs it on another
// thread. A sync covers every byte written to the file before it started, so
// one Sync() makes every transaction committed before it began durable, as
// synchronous=FULL would have made each of them.
// The handle is opened and synced through SQLite's default VFS, the one the
// Store's connection writes through, never through a descriptor of our own:
// so every write and every sync of the journal passes one layer, which is what
// lets a test VFS see them all (tests/power_loss/power_loss_vfs.h). With the
// stock unix VFS, Sync() is an fdatasync of the WAL.
// It touches no connection and nothing of the Store: only its own handle.
#pragma once

#include <sqlite3.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace dispatch::storage {

class WalSyncer {
 public:
  // Opens `wal_path` (dispatch.db-wal, which the Store's connection keeps
  // open, so it is never removed while the Store lives). Unavailable naming
  // the file if it cannot be opened.
  static Result<std::unique_ptr<WalSyncer>> Open(const std::string& wal_path);

  WalSyncer(const WalSyncer&) = delete;
  WalSyncer& operator=(const WalSyncer&) = delete;
  ~WalSyncer();

  // Syncs the WAL. Any thread, one call at a time. Blocks for the disk:
  // never call it on the loop thread when it can be avoided. A failure is
  // Unavailable naming the file; it must never be retried and then trusted
  // (after a failed fsync the kernel may have dropped the dirty pages): the
  // caller fail-stops (Store::FailSync).
  Status Sync();

  // Test hook: the next Sync() fails without syncing, as a disk error would.
  void fail_next_sync_for_testing() { fail_next_ = true; }

 private:
  WalSyncer(std::string path, std::unique_ptr<char[]> file)
      : path_(std::move(path)), file_(std::move(file)) {}
  sqlite3_file* file() { return reinterpret_cast<sqlite3_file*>(file_.get()); }

  std::string path_;
  std::unique_ptr<char[]> file_;  // the VFS's sqlite3_file, szOsFile bytes
  bool fail_next_ = false;
};

}  // namespace dispatch::storage
