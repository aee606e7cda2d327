// Checkpointer: copies the WAL back into dispatch.db off the loop thread. It
// owns its OWN sqlite3 connection (nothing shared with the Store, no mutex) and
// runs PASSIVE checkpoints, which never take SQLite's write lock, so the loop
// thread keeps committing while a checkpoint (and its fsyncs) runs. Its one
// write (RestartWal) runs only while the loop thread writes nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "storage/sqlite.h"

namespace dispatch::storage {

struct CheckpointStats {
  int wal_frames = 0;           // frames in the WAL when the last pass ran
  int checkpointed_frames = 0;  // of those, frames now copied into the database
  int passes = 0;               // PASSIVE checkpoints run by this call
  bool busy = false;            // another checkpoint held SQLite's checkpoint lock
  // Set by RestartWal: this connection restarted the WAL, which now holds
  // `wal_frames` (1) frames, none of them in the database yet.
  bool restarted_wal = false;
  // Everything in the WAL is in the database: the next commit restarts the WAL
  // from its beginning, so the file stops growing.
  bool complete() const { return !busy && checkpointed_frames >= wal_frames; }
};

// Threading contract (for reactor/):
//  - Made by Store::NewCheckpointer() on the loop thread.
//  - Checkpoint() may run on any thread (e.g. in a uv_queue_work work
//    callback) while the loop thread uses the Store, but never on two threads
//    at once: the reactor keeps at most one checkpoint in flight and touches
//    the Checkpointer only from that work callback and, afterwards, from the
//    loop thread (uv's after-work callback orders the two).
//  - Destroy it (on the loop thread, no checkpoint in flight) before the Store:
//    the Store's lock on the work dir must outlive every connection.
//  - It never writes rows; RestartWal's one write rewrites a header value.
//    SQLITE_BUSY is not a failure (retry later); any
//    other error is the disk failing us (a failed fsync may have dropped
//    pages of the WAL or the database) and the owner fail-stops on it
//    (DurableState::OnCheckpointDone).
//  - Hand every result to Store::FinishCheckpoint on the loop thread: it lets
//    the WAL restart under steady load (see store.h).
class Checkpointer {
 public:
  // Opens a second connection to `db_path` (which the Store has already
  // opened in WAL mode). `wal_size_limit_bytes`: the Store's
  // journal_size_limit, which a restart on this connection applies.
  static Result<std::unique_ptr<Checkpointer>> Open(const std::string& db_path,
                                                    uint64_t wal_size_limit_bytes);

  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;
  ~Checkpointer() = default;

  // Runs PASSIVE checkpoints (at most 4) until the WAL is fully copied or a
  // pass makes no progress (a reader or concurrent commits hold it back).
  // Blocks for the fsyncs of the WAL and the database: never call it on the
  // loop thread. SQLITE_BUSY (another checkpoint running) is not an error: it
  // returns stats with complete() false.
  Result<CheckpointStats> Checkpoint();

  // REQUIRES: the Store's connection writes nothing until this returns.
  // SQLite restarts the WAL in the first write after a checkpoint copied all
  // of it, and syncs the new WAL header right there: an fdatasync that,
  // behind other I/O (a snapshot being written), took 10-90 ms. Left to the
  // loop's next commit, that stalls every reply. This makes that first
  // write here, off the loop: one transaction that rewrites the format
  // version with the value it has, so the WAL restarts on this connection
  // (header synced) and the loop's commits append after it. Returns
  // restarted_wal false, and writes nothing, when `done` (this connection's
  // last Checkpoint()) did not copy the whole WAL, or when the WAL could not
  // restart after all (a commit or a reader got in first: the write then
  // only appended a frame, which changes nothing). Never waits for a lock:
  // SQLITE_BUSY is "not now". Any other error is the disk failing us.
  Result<CheckpointStats> RestartWal(const CheckpointStats& done);

 private:
  Checkpointer(std::string db_path, SqliteDb db)
      : db_path_(std::move(db_path)), db_(std::move(db)) {}
  static int OnWalCommit(void* self, sqlite3* db, const char* name, int frames);

  std::string db_path_;
  SqliteDb db_;
  int committed_frames_ = 0;  // the WAL's length after this connection's last commit
};

}  // namespace dispatch::storage
