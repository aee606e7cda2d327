// DurableState: the dispatcher's durability, recovered and wired. It
// rebuilds the state from the journal and owns the parts that keep it:
//  - CommitPipeline: submit, barrier, group commit, hold (commit_pipeline.h);
//  - SyncStage: the WAL fsync, on the loop or the pool (sync_stage.h),
//    when the Store defers it; the replicated journal is another stage
//    (HA mode, SetReplicator);
//  - Compaction: snapshots and checkpoints, off the loop (compaction.h);
//  - ResultStore and DatasetStore: what the journal's records store beside
//    them (result_store.h, dataset_store.h);
//  - OnlineBackup: a copy of the work dir made while it serves
//    (online_backup.h).
// EndOfPass() is what the loop runs at the end of every pass, in order.
// REQUIRES: loop thread only.
#pragma once

#include <kj/async.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "reactor/commit_pipeline.h"
#include "reactor/compaction.h"
#include "reactor/dataset_store.h"
#include "reactor/journal_replicator.h"
#include "reactor/online_backup.h"
#include "reactor/result_store.h"
#include "reactor/sync_stage.h"
#include "reactor/uvkj/repeating_timer.h"
#include "state/dispatcher_state.h"
#include "storage/store.h"

namespace dispatch::reactor {

// Exit code of a dispatcher that stopped because its journal could not be
// written; the restart replays up to the last durable commit.
inline constexpr int kExitStorageFailure = 3;
// Exit code of a dispatcher that stopped because an invariant of its own
// broke (the store refused, as input, a batch every update of which Submit
// had sized): a bug, not the disk. The restart replays as after exit 3.
inline constexpr int kExitInternalError = 4;
// Exit code of an HA dispatcher (--etcd) that stopped because its leadership
// ended: its lease was lost, or a journal transaction failed its compare
// (fenced: another dispatcher leads), or the etcd journal refused a batch.
// Nothing of the batch in flight was acknowledged; a supervisor restarts it
// as a candidate (docs/high_availability.md §3, §4).
inline constexpr int kExitLeadershipLost = 5;

// The settings of every part, as the dispatcher's flags set them.
struct DurableStateOptions {
  uint64_t snapshot_every = 100000;                                    // CompactionOptions
  uint64_t max_batch_bytes = 64u << 20;                                // CommitPipelineOptions
  bool snapshot_in_background = true;                                  // CompactionOptions
  uint64_t snapshot_retry_ms = 10000;                                  // CompactionOptions
  std::function<void(const SnapshotOutcome&)> snapshot_observer = {};  // CompactionOptions
  SyncStageOptions sync;
  std::string record_limit_reason = {};  // CommitPipelineOptions
  size_t result_bytes_per_commit = 0;    // ResultStoreOptions
  size_t result_file_bytes = 1u << 20;   // ResultStoreOptions
  OnlineBackupOptions backup;
};

struct RecoveryStats {
  uint64_t replayed = 0;         // updates replayed at start-up
  uint64_t recovery_micros = 0;  // time to load the snapshot and replay
};

class DurableState {
 public:
  // Rebuilds the state from `store`: the latest snapshot, then every record
  // after it through the same Apply. A record that does not decode or does
  // not apply is DataLoss naming its sequence number: start-up stops rather
  // than continue from a partial state.
  // `live` (HA mode, a hot standby's takeover): the state already built
  // from exactly the store's snapshot and records (StandbyFollower applied
  // each as it arrived); it is taken as it is, with no replay.
  static Result<std::unique_ptr<DurableState>> Recover(
      uv_loop_t* loop, storage::Store& store, DurableStateOptions options,
      std::unique_ptr<state::DispatcherState> live = nullptr);
  // Gives background work in flight up without waiting (uvkj::PoolWork):
  // none of it touches this object or the Store afterwards. An owner about
  // to close the Store awaits StopBackgroundWork() first.
  ~DurableState();
  DurableState(const DurableState&) = delete;
  DurableState& operator=(const DurableState&) = delete;

  CommitPipeline& pipeline() { return *pipeline_; }
  const CommitPipeline& pipeline() const { return *pipeline_; }
  ResultStore& results() { return *results_; }
  const ResultStore& results() const { return *results_; }
  DatasetStore& datasets() { return *datasets_; }
  Compaction& compaction() { return *compaction_; }
  const Compaction& compaction() const { return *compaction_; }
  // Null when the Store syncs itself (no deferred fsync).
  SyncStage* sync_stage() { return sync_.get(); }
  const SyncStage* sync_stage() const { return sync_.get(); }
  storage::Store& store() { return store_; }
  const storage::Store& store() const { return store_; }

  // The state behind the barrier (the pipeline's).
  const state::DispatcherState& state() const { return pipeline_->state(); }

  // The end of every loop pass (the event port's pass-end hook); see the
  // definition for the steps and the reason for their order.
  void EndOfPass();
  // EndOfPass with the commit forced (CommitPipeline::CommitNow: no hold,
  // no gate): shutdown, and callers that drive the state without turning
  // the loop (benches, tests).
  void CommitNow();

  // Forgets the whole state but keeps every next-id counter (ids are never
  // reused), by writing a snapshot of that empty state over the journal.
  // Used at start-up without fault-tolerant mode. REQUIRES: nothing pending.
  Status ResetKeepingIds();

  // HA mode: every write must also pass `replicator` (a durability stage)
  // and local snapshots are announced to it. Set once, before the first
  // Submit; never set in single-node mode.
  void SetReplicator(JournalReplicator* replicator);
  // The replicator failed (leadership lost, fenced, etcd refused): fail-stop
  // as after a failed commit; replication_failed() tells the owner's exit code.
  void ReplicationFailed(const Status& status);
  bool replication_failed() const { return replication_failed_; }

  // Backs the work dir up into `target` while serving (OnlineBackup::Start).
  // Refused at once in HA mode (the journal is etcd's; the store here is a
  // cache of it), after a failure and once background work stopped.
  kj::Promise<Result<BackupOutcome>> Backup(const std::string& target);
  const OnlineBackup& backup() const { return *backup_; }

  // True while work of ours that writes much to the disk runs on the thread
  // pool: a snapshot, a checkpoint, the unlink of a snapshot file, a
  // result file's write, or a backup (on the loop or the pool). A WAL fsync then waits behind that I/O (ext4's
  // ordered journal writes the other files' data first), so it does not
  // run on the loop meanwhile.
  bool disk_busy() const;
  // True when nothing written is waiting for its fsync.
  bool all_durable() const { return sync_ == nullptr || sync_->all_durable(); }

  // The shutdown step before the Store closes: starts no more background
  // snapshots or checkpoints, cancels a snapshot in flight, and resolves
  // once no work of ours is left on the thread pool (at once if none is; a
  // WAL fsync in flight is let finish, so its replies leave; result reads
  // waiting are rejected, the running one let finish). Commits go on
  // meanwhile. Idempotent; one waiter at a time.
  // REQUIRES: a KJ event loop on this thread.
  kj::Promise<void> StopBackgroundWork();
  bool background_stopped() const { return background_stopped_; }

  const RecoveryStats& recovery() const { return recovery_; }

 private:
  DurableState(uv_loop_t* loop, storage::Store& store, DurableStateOptions options);

  // Fulfils the StopBackgroundWork() waiter once nothing is in flight.
  void WakeStopWaiter();
  // A checkpoint, snapshot, WAL fsync or result read runs on the pool.
  bool BackgroundWorkInFlight() const;

  uv_loop_t* const loop_;
  storage::Store& store_;
  const DurableStateOptions options_;
  // The pipeline first: the parts after it hold references to it.
  std::unique_ptr<CommitPipeline> pipeline_;
  std::unique_ptr<SyncStage> sync_;
  std::unique_ptr<ResultStore> results_;
  std::unique_ptr<DatasetStore> datasets_;
  std::unique_ptr<Compaction> compaction_;
  // After compaction_: destroyed before it (it pauses its checkpoints).
  std::unique_ptr<OnlineBackup> backup_;
  // Ticks while a commit is held so that an expired hold commits even when
  // the loop has nothing else to do.
  std::unique_ptr<uvkj::UvRepeatingTimer> hold_timer_;
  JournalReplicator* replicator_ = nullptr;
  bool replication_failed_ = false;
  bool background_stopped_ = false;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> stop_waiter_;
  RecoveryStats recovery_;
};

}  // namespace dispatch::reactor
