// OnlineBackup: `dispatchctl backup` inside the dispatcher. It copies the
// work dir into a new directory while the loop keeps serving, in three
// phases (storage/backup_dir.h says what each leaves on disk):
//  1. the pool prepares the target (missing or empty; INITIALIZED first);
//  2. the loop copies the database through SQLite's backup API on the
//     Store's own connection, a bounded number of pages per KJ turn, so the
//     commits between turns are written into the copy too and no turn holds
//     the loop long; checkpoints wait meanwhile (a WAL restart by the
//     checkpointer's connection would make SQLite start the copy over). In
//     the turn of the last step the copy is the database as of the last
//     commit, and in that same turn the snapshot and result files are
//     linked (or opened, to copy) before the loop can remove any of them;
//  3. the pool copies what could not be linked, syncs everything, names the
//     database and writes COMMITTED.
// One backup at a time. A failure after phase 1 removes what was written
// before the caller hears of it. At shutdown a copy in phase 2 is abandoned
// and removed; a phase on the pool is let finish (in_flight()).
// REQUIRES: loop thread only; destroyed before the Store.
#pragma once

#include <kj/async.h>
#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "reactor/uvkj/pool_work.h"
#include "storage/backup_dir.h"
#include "storage/store.h"

namespace dispatch::reactor {

struct OnlineBackupOptions {
  // Database pages copied per step, one step per KJ turn: bounds how long a
  // step holds the loop (SQLite reads them through the Store's cache and
  // writes them into the copy's page cache; no fsync). The event port runs
  // further steps in the same slice while its 0.5 ms last, so a small step
  // costs little speed. TEST-ONLY: 0 copies nothing, so the copy never ends
  // by itself.
  uint64_t pages_per_step = 64;
  // Snapshot and result files one backup may copy rather than link, each
  // held open from the last step until it is copied (storage/backup_dir.h).
  size_t max_copied_files = 1024;
};

struct BackupOutcome {
  std::string target;
  uint64_t last_seq = 0;  // the copy's last journal record
  uint64_t database_bytes = 0;
  uint64_t files_linked = 0;
  uint64_t files_copied = 0;
  uint64_t copied_bytes = 0;
  uint64_t pages = 0;  // of the database when the copy completed
  uint64_t steps = 0;
  uint64_t longest_step_micros = 0;
  uint64_t total_micros = 0;  // from the call to the synced copy
};

struct BackupStats {
  uint64_t started = 0;    // accepted (not refused at once)
  uint64_t completed = 0;
  uint64_t failed = 0;     // accepted, then failed (the target refused included)
};

class OnlineBackup {
 public:
  // `pause_checkpoints(true)` while phase 2 runs, `(false)` after it.
  // `on_idle`: a pool phase ended (the owner's stop waiter looks).
  OnlineBackup(uv_loop_t* loop, storage::Store& store, OnlineBackupOptions options,
               std::function<void(bool)> pause_checkpoints, std::function<void()> on_idle);
  // Abandons a copy in phase 2 and gives a pool phase up (uvkj::PoolWork);
  // the caller waiting is told Unavailable. Files are left as they are.
  ~OnlineBackup();
  OnlineBackup(const OnlineBackup&) = delete;
  OnlineBackup& operator=(const OnlineBackup&) = delete;

  // Backs the work dir up into `target`. Refused at once, changing nothing:
  // InvalidArgument for a relative path; FailedPrecondition while a backup
  // runs, or for the work dir or a directory inside it; Unavailable once
  // stopped. Later (the promise): FailedPrecondition when `target` exists
  // and is not an empty directory (nothing changed), or the failure that
  // ended the backup (what it wrote removed by then).
  kj::Promise<Result<BackupOutcome>> Start(const std::string& target);

  // Shutdown: no new backup; a copy in phase 2 is abandoned, its files
  // removed on the pool, and its caller told Unavailable.
  void Stop();

  bool running() const { return phase_ != Phase::kIdle; }
  // A phase runs on the pool (the owner waits for it before the Store goes).
  bool in_flight() const { return job_.in_flight(); }
  // The copy writes much to the disk, on the loop or the pool: a WAL fsync
  // on the loop would queue behind it.
  bool disk_busy() const { return running(); }
  const BackupStats& stats() const { return stats_; }

 private:
  enum class Phase { kIdle, kPreparing, kCopying, kCompleting, kRemoving };
  struct FileJob;

  void StartJob(std::unique_ptr<FileJob> job);
  void OnJobDone(std::unique_ptr<FileJob> job);
  void OnPrepared(FileJob& job);
  // Phase 2: one step per KJ turn until the copy is complete.
  kj::Promise<void> StepTurns();
  // The turn of the last step: pins the files, hands phase 3 to the pool.
  void CopyComplete();
  void OnCompleted(FileJob& job);
  // Ends the backup with `status`: after removing what it wrote when
  // `remove`, else at once.
  void Fail(Status status, bool remove);
  // Tells the caller and goes idle.
  void Finish(Result<BackupOutcome> result);

  uv_loop_t* const loop_;
  storage::Store& store_;
  const OnlineBackupOptions options_;
  const std::function<void(bool)> pause_checkpoints_;
  const std::function<void()> on_idle_;
  Phase phase_ = Phase::kIdle;
  bool stopped_ = false;
  bool checkpoints_paused_ = false;
  // The backup running (phase_ != kIdle).
  std::string target_;
  bool created_target_ = false;
  uint64_t start_ns_ = 0;
  BackupOutcome outcome_;
  Status removal_reason_;  // why phase kRemoving runs
  std::unique_ptr<storage::DatabaseBackup> copy_;
  kj::Promise<void> stepping_ = nullptr;
  kj::Own<kj::PromiseFulfiller<Result<BackupOutcome>>> caller_;
  uvkj::PoolWork<FileJob> job_;
  BackupStats stats_;
};

}  // namespace dispatch::reactor
