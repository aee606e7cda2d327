// Compaction: what keeps the journal short and start-up quick without
// holding a reply. Snapshots: every snapshot_every records, right after a
// commit, a SnapshotReplica task (a second copy of the state on the thread
// pool) catches up with the journal, encodes itself and writes the file;
// the loop records the file when the task is back, and the files that
// record made obsolete are removed once it is durable. Checkpoints: when
// the WAL is long, a pool task copies it into the database; when it copied
// everything, a second pass restarts the WAL while commits are held (the
// commit gate), so that the restart's header fsync is never the loop's.
// A failed snapshot loses nothing (the journal keeps every record) and is
// retried later; a failed checkpoint is the disk failing us: fail-stop.
// REQUIRES: loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "reactor/commit_pipeline.h"
#include "reactor/histogram.h"
#include "reactor/journal_replicator.h"
#include "reactor/snapshot_replica.h"
#include "reactor/uvkj/pool_work.h"
#include "storage/store.h"

namespace dispatch::reactor {

struct CompactionOptions {
  // A snapshot is started once this many records were journaled since the
  // last one started (0: only on clean shutdown).
  uint64_t snapshot_every = 100000;
  // true: the snapshot replica encodes and writes the snapshot on the thread
  // pool. false: the loop thread encodes and writes it itself, holding every
  // reply meanwhile (the behaviour before issue 12; for comparison).
  bool snapshot_in_background = true;
  // After a failed background snapshot, the next one starts no sooner than
  // this (nothing is lost meanwhile: the journal keeps every record).
  uint64_t snapshot_retry_ms = 10000;
  // Called on the loop thread after every snapshot attempt (benchmarks, tests).
  std::function<void(const SnapshotOutcome&)> snapshot_observer = {};
};

struct CompactionStats {
  uint64_t snapshots = 0;             // snapshots recorded (background and inline)
  uint64_t snapshot_failures = 0;     // attempts that wrote or recorded nothing
  uint64_t last_snapshot_micros = 0;  // start to recorded, of the last one
  uint64_t last_snapshot_bytes = 0;
  uint64_t checkpoints = 0;
  // WAL restarts after a complete checkpoint made by the checkpointer's one
  // write on the pool (commits held meanwhile). Those made by a commit on the
  // loop, which then syncs the new WAL header there (after rare races), are
  // the Store's count: Store::wal_restarts_on_loop().
  uint64_t wal_restarts_off_loop = 0;
};

class Compaction {
 public:
  // `snapshotter`: the replica built at recovery (primed or not).
  // `on_idle`: called when a pool task of ours ended (the owner's stop
  // waiter checks whether any is left).
  Compaction(uv_loop_t* loop, storage::Store& store, CommitPipeline& pipeline,
             std::unique_ptr<SnapshotReplica> snapshotter,
             std::unique_ptr<storage::Checkpointer> checkpointer, CompactionOptions options,
             std::function<void()> on_idle);
  // Gives pool work in flight up without waiting (uvkj::PoolWork): a
  // snapshot task stops at its next check, a checkpoint finishes on its own
  // connection; neither touches this object or the Store.
  ~Compaction();
  Compaction(const Compaction&) = delete;
  Compaction& operator=(const Compaction&) = delete;

  // HA mode: local snapshots are announced to the replicated journal, so
  // that it snapshots too and drops what a snapshot covers.
  void SetReplicator(JournalReplicator* replicator) { replicator_ = replicator; }

  // After a pass's commit: starts a snapshot or a checkpoint when one is due.
  void AfterCommit();
  // The commit gate: commits wait while a checkpoint restarts the WAL, or a
  // pass that copied the whole WAL has not come back yet (the next write
  // would restart the WAL on the loop).
  bool commits_held() const;
  // A commit went ahead anyway (CommitPipeline::CommitNow): the pass that
  // restarts the WAL falls short, or the loop restarts it itself.
  void CommitsForced() { writes_held_ = false; }

  // Writes a snapshot of the current (committed) state now, on this thread
  // (clean shutdown, tests). A background one in flight is then stale: its
  // file is removed when it comes back.
  Status Snapshot();
  // A snapshot of `seq` was written outside (a reset's empty state): the
  // replica is stale, and the next snapshot counts from there.
  void NoteSnapshotWritten(uint64_t seq);

  // While paused no checkpoint starts, nor the pass that restarts the WAL:
  // an online backup (online_backup.h) copies the database meanwhile, and a
  // WAL restart written by the checkpointer's connection makes SQLite start
  // that copy over. The WAL grows until the pause ends.
  void PauseCheckpoints(bool paused) { checkpoints_paused_ = paused; }

  // Starts no more background snapshots or checkpoints and asks a snapshot
  // in flight to stop soon (shutdown). Work already running finishes.
  void Stop();
  bool snapshot_in_flight() const { return snapshotter_ != nullptr && snapshotter_->in_flight(); }
  void CancelSnapshot() {
    if (snapshotter_ != nullptr) snapshotter_->Cancel();
  }
  bool checkpoint_in_flight() const { return checkpoint_.in_flight(); }
  // A snapshot, a checkpoint or a snapshot file's unlink runs on the pool.
  bool disk_busy() const;
  // A snapshot or a checkpoint runs on the pool (unlinks are not waited for).
  bool in_flight() const { return snapshot_in_flight() || checkpoint_in_flight(); }

  // Test hook: the next background snapshots fail at `fault`.
  void set_snapshot_fault_for_testing(SnapshotFault fault);

  const CompactionStats& stats() const { return stats_; }
  const Histogram& snapshot_seconds() const { return snapshot_seconds_; }
  const Histogram& checkpoint_seconds() const { return checkpoint_seconds_; }

 private:
  struct CheckpointJob;
  void MaybeSnapshot();
  void MaybeCheckpoint();
  // `remainder`: the pass that copies what the last one could not, with
  // commits held (writes_held_) until it is back.
  // False when the pool refused it (nothing runs).
  bool StartCheckpoint(bool remainder);
  void OnCheckpointDone(std::unique_ptr<CheckpointJob> job);
  void OnSnapshotDone(SnapshotOutcome outcome);
  void OnSnapshotDoneLocally(SnapshotOutcome& outcome);
  // Hands a snapshot outcome held by commits_held() to OnSnapshotDone.
  void RecordHeldSnapshot();
  void RemoveSnapshotFiles(const std::vector<std::string>& names);
  // Fail-stop after the store failed us.
  void Fail(const Status& status) { pipeline_.FailStop(status); }

  uv_loop_t* const loop_;
  storage::Store& store_;
  CommitPipeline& pipeline_;
  const CompactionOptions options_;
  const std::function<void()> on_idle_;
  JournalReplicator* replicator_ = nullptr;
  std::unique_ptr<SnapshotReplica> snapshotter_;
  // Record after which the last snapshot started (or was recorded).
  uint64_t last_snapshot_start_seq_ = 0;
  uint64_t snapshot_not_before_ns_ = 0;  // retry delay after a failure
  // A snapshot that ended while commits_held(): recorded when they are not.
  std::optional<SnapshotOutcome> held_snapshot_outcome_;
  // Owned here while idle, by the checkpoint job while it runs.
  std::unique_ptr<storage::Checkpointer> checkpointer_;
  uvkj::PoolWork<CheckpointJob> checkpoint_;
  bool writes_held_ = false;  // a remainder checkpoint runs: commit nothing
  bool checkpoints_paused_ = false;
  uint64_t checkpoint_start_ns_ = 0;
  bool stopped_ = false;
  // Snapshot files being unlinked on the thread pool. Shared with each
  // request, which may come back after this object is gone.
  std::shared_ptr<uint64_t> unlinks_in_flight_ = std::make_shared<uint64_t>(0);
  CompactionStats stats_;
  Histogram snapshot_seconds_{Histogram::SecondsBounds()};    // start to recorded
  Histogram checkpoint_seconds_{Histogram::SecondsBounds()};  // on the pool, start to done
};

}  // namespace dispatch::reactor
