// WalSyncer: makes the journal's written transactions durable without the
// loop thread waiting. With StoreOptions.defer_sync the Store's connection
// commits into the WAL (the OS page cache) without an fsync; a WalSyncer,
// holding its own descriptor of the same WAL file, then fdatasyncs it on
// another thread. An fdatasync covers every byte written to the file before
// it started, so one Sync() makes every transaction committed before it
// began durable, as synchronous=FULL would have made each of them.
// It touches no SQLite object and nothing of the Store: only its descriptor.
#pragma once

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

  // fdatasync of the WAL. Any thread, one call at a time. Blocks for the
  // disk: never call it on the loop thread when it can be avoided. A failure
  // is Unavailable naming the file and the errno; it must never be retried
  // and then trusted (after a failed fsync the kernel may have dropped the
  // dirty pages): the caller fail-stops (Store::FailSync).
  Status Sync();

  // Test hook: the next Sync() fails without syncing, as a disk error would.
  void fail_next_sync_for_testing() { fail_next_ = true; }

 private:
  WalSyncer(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_;
  bool fail_next_ = false;
};

}  // namespace dispatch::storage
