// DurableState: the dispatcher's state behind the durability barrier. Every
// change goes validate -> journal -> apply: Submit checks an Update against
// the state, appends it to this loop pass's batch and applies it (so later
// requests of the same pass see it); CommitPass, run once at the end of each
// loop pass, writes the whole batch in one SQLite transaction. Every write
// to the store gets the next write number and must then pass each
// durability stage (durability_stage.h): the WAL fsync when the Store
// defers it (SyncStage, --synchronous=full), the etcd journal in HA mode.
// The replies parked on Barrier() leave once every stage has passed the
// write that covers what they may have observed. A failed commit, fsync or
// stage is fail-stop: no reply is acknowledged again and the process exits
// with kExitStorageFailure (kExitLeadershipLost for the etcd journal).
// Snapshots never hold a reply: CommitPass only starts a SnapshotReplica task
// (a second copy of the state on the thread pool catches up with the journal,
// encodes itself and writes the file) and records the file when the task is
// done; the journal records it covers are deleted a slice per later commit.
// REQUIRES: loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <capnp/message.h>
#include <kj/async.h>

#include "common/status.h"
#include "reactor/durability_stage.h"
#include "reactor/durable_waiters.h"
#include "reactor/histogram.h"
#include "reactor/journal_replicator.h"
#include "reactor/result_reads.h"
#include "reactor/snapshot_replica.h"
#include "reactor/sync_stage.h"
#include "reactor/uvkj/pool_work.h"
#include "reactor/uvkj/repeating_timer.h"
#include "schema/journal.capnp.h"
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

struct DurableStateOptions {
  // A snapshot is started once this many records were journaled since the
  // last one started (0: only on clean shutdown).
  uint64_t snapshot_every = 100000;
  // A pass whose batch (records and dataset definitions) would grow past
  // this many bytes commits what it holds first, so that one transaction,
  // and the memory its batch pins, stays bounded however many large updates
  // arrive in one loop pass. One update larger than this commits alone.
  uint64_t max_batch_bytes = 64u << 20;
  // true: the snapshot replica encodes and writes the snapshot on the thread
  // pool. false: the loop thread encodes and writes it itself, holding every
  // reply meanwhile (the behaviour before issue 12; for comparison).
  bool snapshot_in_background = true;
  // After a failed background snapshot, the next one starts no sooner than
  // this (nothing is lost meanwhile: the journal keeps every record).
  uint64_t snapshot_retry_ms = 10000;
  // Called on the loop thread after every snapshot attempt (benchmarks, tests).
  std::function<void(const SnapshotOutcome&)> snapshot_observer = {};
  // With a deferred fsync: where it runs (sync_stage.h). Larger commits (a
  // busy loop) and a disk that is slow lately keep the fsync off the loop,
  // where it would hold every reply while it lasts. DESIGN.md allows both:
  // once per loop pass, or the pool.
  SyncStageOptions sync;
  // Appended to the refusal of an update larger than a journal record, to
  // say where the limit comes from (HA mode: one etcd transaction).
  std::string record_limit_reason = {};
  // HA mode: the closure results one record finishes take at most this many
  // bytes together (one result alone may take more, up to its own limit),
  // so that a pass's batch fits one etcd transaction. 0: no bound (single
  // node: results go to the local result table).
  size_t result_bytes_per_commit = 0;
  // Closure results of at least this many bytes are kept in files of their
  // own (storage/result_file.h), written and fsynced on the thread pool
  // before the update finishing the closure is journaled, instead of rows
  // written by the loop's commit (a 32 MiB row held every reply ~150 ms).
  // Smaller results stay rows: many of them share one commit's fsync. 0:
  // never (HA mode: results must ride in the replicated journal).
  size_t result_file_bytes = 1u << 20;
};

struct DurableStats {
  uint64_t commits = 0;          // group commits (transactions) written
  uint64_t records = 0;          // updates journaled
  uint64_t max_batch = 0;        // most updates in one commit
  uint64_t snapshots = 0;        // snapshots recorded (background and inline)
  uint64_t snapshot_failures = 0;  // attempts that wrote or recorded nothing
  uint64_t last_snapshot_micros = 0;  // start to recorded, of the last one
  uint64_t last_snapshot_bytes = 0;
  uint64_t checkpoints = 0;
  // WAL restarts after a complete checkpoint made by the checkpointer's one
  // write on the pool (commits held meanwhile). Those made by a commit on the
  // loop, which then syncs the new WAL header there (after rare races), are
  // the Store's count: Store::wal_restarts_on_loop().
  uint64_t wal_restarts_off_loop = 0;
  uint64_t replayed = 0;         // updates replayed at start-up
  uint64_t recovery_micros = 0;  // time to load the snapshot and replay
  uint64_t refused_for_size = 0; // updates refused: larger than a journal record
  uint64_t early_commits = 0;    // commits made mid-pass at max_batch_bytes
  uint64_t results_stored = 0;   // closure results stored (rows and files)
  uint64_t result_bytes_stored = 0;
  uint64_t result_files_stored = 0;  // of those, kept in files (result_file_bytes)
  uint64_t results_read = 0;     // stored results read back (fetches)
  uint64_t result_bytes_read = 0;
  uint64_t results_read_off_loop = 0;  // of results_read: read on the thread pool
  uint64_t results_damaged = 0;  // reads refused as missing, damaged or mismatched
  uint64_t unheld_results_dropped = 0;  // rows and files deleted at start-up (see DropUnheldResults)
};

// Distributions for /metrics (seconds, except records per commit).
struct DurableHistograms {
  // One group commit's write (store_.Commit; with the fsync unless it is deferred).
  Histogram commit_seconds{Histogram::SecondsBounds()};
  Histogram records_per_commit{Histogram::CountBounds()};
  Histogram snapshot_seconds{Histogram::SecondsBounds()};    // start to recorded
  Histogram checkpoint_seconds{Histogram::SecondsBounds()};  // on the thread pool, start to done
};

class DurableState final {
 public:
  // Rebuilds the state from `store`: the latest snapshot, then every record
  // after it through the same Apply. A record that does not decode or does
  // not apply is DataLoss naming its sequence number: start-up stops rather
  // than continue from a partial state.
  // `live` (HA mode, a hot standby's takeover): the state already built
  // from exactly the store's snapshot and records (StandbyFollower applied
  // each as it arrived); it is taken as it is, with no replay.
  static Result<std::unique_ptr<DurableState>> Recover(uv_loop_t* loop, storage::Store& store,
                                                       DurableStateOptions options,
                                                       std::unique_ptr<state::DispatcherState> live = nullptr);
  // Gives background work in flight up without waiting (uvkj::PoolWork):
  // a snapshot task stops at its next check, a checkpoint finishes on its
  // own connection; neither touches this object or the Store. An owner
  // about to close the Store awaits StopBackgroundWork() first.
  ~DurableState();
  DurableState(const DurableState&) = delete;
  DurableState& operator=(const DurableState&) = delete;

  const state::DispatcherState& state() const { return state_; }

  // The one clock of the state: wall-clock microseconds (times survive a
  // restart), never earlier than the last applied update's time.
  int64_t NowMicros() const;

  // Sizes `update`, validates it, appends it to the pass's batch and applies
  // it. An update whose journal record would pass the store's
  // max_record_bytes is ResourceExhausted naming the update, its size and the
  // limit; a rejected update (that or the Check error) changes nothing and
  // journals nothing. When the update would take the batch past
  // max_batch_bytes, the batch commits first (a commit failure then fails
  // this Submit). After a storage failure every Submit fails with it.
  Status Submit(journal::Update::Reader update);
  // The same with the update's journal bytes made already (from the message
  // it was built in: UpdateList::EncodedIfOneSegment). REQUIRES: `encoded`
  // decodes to `update`. Bytes past the record limit are compacted
  // (EncodeUpdate) before the update is refused for its size.
  Status Submit(journal::Update::Reader update, std::string encoded);
  // Stores a dataset definition in the same transaction as the pass's
  // updates. REQUIRES: the update naming it was just submitted (so nothing
  // commits between them) and the caller checked its size
  // (max_dataset_bytes): the store refusing it at commit is a bug.
  void PutDataset(std::string key, std::string definition);
  // The store's limit on one journal record, for builders of list-shaped
  // updates that cut their lists to fit (state/record_budget.h).
  size_t max_record_bytes() const { return store_.options().max_record_bytes; }
  // DurableStateOptions::result_bytes_per_commit.
  size_t result_bytes_per_commit() const { return options_.result_bytes_per_commit; }
  // Commits the batch now when `bytes` more would take it past
  // max_batch_bytes; the commit's failure, if any. Submit does this for its
  // own record; a handler that puts a dataset definition right after its
  // record calls it first with both sizes, so the definition counts too.
  Status MakeRoom(size_t bytes);
  // Submit's size check alone, for a handler that must know before it
  // changes anything else (e.g. before removing a worker's old registration).
  Status CheckFits(journal::Update::Reader update) const;
  // A definition stored under `key`: this pass's puts first (not committed
  // yet, but the update naming them is applied), then the store.
  Result<std::string> GetDataset(const std::string& key);

  // Stores a closure result in the same transaction as the pass's updates,
  // under the closure's id. REQUIRES: the update finishing the closure with
  // `resultStored` was submitted in this pass.
  void PutResult(uint64_t closure_id, std::string bytes);
  // Deletes a stored result: a row in the same transaction as the pass's
  // updates; a file is only forgotten here and returned, for the caller to
  // remove once the pass is durable (Barrier()): removed before, a crash
  // could restart with the closure still holding a result whose file is gone.
  // REQUIRES: the update releasing the closure was submitted in this pass.
  std::optional<storage::ResultFileId> DeleteResult(uint64_t closure_id);
  // True when a result of `size` bytes is to be kept in a file.
  bool StoresResultInFile(uint64_t size) const {
    return options_.result_file_bytes != 0 && size >= options_.result_file_bytes &&
           options_.result_bytes_per_commit == 0;
  }
  // Where result files live (the Store's results/).
  std::string result_dir() const { return store_.result_dir(); }
  // Records that `closure_id`'s result is the file WriteResultFile wrote for
  // `attempt` (durable already). REQUIRES: the update finishing the closure
  // with `resultStored` and this size was just submitted, in this pass.
  void AdoptResultFile(uint64_t closure_id, uint32_t attempt, uint64_t size);
  // Results held in files now (closure id -> attempt).
  const std::map<uint64_t, uint32_t>& result_files() const { return result_files_; }
  // The result of a finished closure: its inline bytes, or the stored ones
  // (this pass's puts first, then the store), checked against the size and
  // CRC32C the state holds. A missing, damaged or mismatched stored result is
  // DataLoss naming the closure: damaged bytes are never returned.
  Result<std::string> GetResult(const state::Closure& closure);
  // The same, copied straight into `dest`, which has room for exactly
  // ResultSize(closure) bytes (a reply's own buffer: one copy, no string in
  // between). On an error `dest` holds zeros.
  Status ReadResult(const state::Closure& closure, char* dest);
  static uint64_t ResultSize(const state::Closure& closure) {
    return closure.result_stored ? closure.result_size : closure.result.size();
  }
  // Where a finished closure's result is when reading it is work for the
  // thread pool (ReadStoredResults): a row committed or a file. nullopt when
  // its bytes are at hand on the loop (inline, put in this pass, or empty):
  // ReadResult copies those.
  std::optional<storage::ResultLocation> LocateStoredResult(const state::Closure& closure) const;
  // Reads them on the thread pool, one call's list at a time
  // (reactor/result_reads.h). Rejected once background work is stopped.
  kj::Promise<std::unique_ptr<ResultReads::Done>> ReadStoredResults(
      std::vector<storage::ResultLocation> locations);
  // Counts a read served (ok) or refused (DataLoss); `off_loop`: one of
  // ReadStoredResults.
  void CountResultRead(uint64_t bytes, bool ok, bool off_loop = false);
  // What the status a ReadStoredResults read gave for a result of `size`
  // bytes means, its closure still being held: NotFound is the
  // MissingResultError (held, so not released: lost); one served or found
  // damaged is counted. Replies and input pushes both take it.
  Status HeldResultRead(uint64_t closure_id, uint64_t size, Status read);
  // The DataLoss of a stored result that is not there (`not_found` says
  // where it was looked for) while the state still holds its closure.
  static Status MissingResultError(uint64_t closure_id, const Status& not_found);

  // Forgets the whole state but keeps every next-id counter (ids are never
  // reused), by writing a snapshot of that empty state over the journal.
  // Used at start-up without fault-tolerant mode. REQUIRES: nothing pending.
  Status ResetKeepingIds();

  // Resolves when everything submitted so far is durable: at once when
  // nothing is pending, else once every durability stage has passed the
  // write covering it. Every reply waits on it, reads included (a read may
  // have observed an update that is applied but not yet durable).
  kj::Promise<void> Barrier();
  // Runs `action` once everything written so far is durable (at once when
  // it is; never after a failure). REQUIRES: nothing submitted is pending
  // (an action waits for writes, not for the pass's batch).
  void WhenWrittenDurable(kj::Function<void()> action);

  // Commits the pass's batch and releases the parked replies (with a Store
  // that defers its fsync: starts the fsync, or leaves it to the next one
  // when one is in flight, and the replies leave when it is back), then
  // starts a background snapshot or a checkpoint when due (neither waits for
  // its work). The reactor runs it at the end of every loop pass.
  // While a hold is on (below) it commits nothing until the hold ends.
  void CommitPass();
  // Holds the commit for at most `micros` (measured from the first hold of a
  // batch; later holds do not extend it), so that work expected within a few
  // loop passes joins the same transaction: a closure pushed to a worker
  // before its assignment commits, whose report then commits with it. Replies
  // still leave only after the commit: a hold delays them, never skips it.
  void HoldCommit(uint64_t micros);
  // Ends the hold; the next pass end commits.
  void ReleaseHold();
  bool holding() const { return hold_deadline_ns_ != 0; }
  // Ends any hold and commits now, even while a checkpoint holds commits
  // (commits_held(): the loop then restarts the WAL itself, or a remainder
  // pass falls short): shutdown, a batch at its bound, and callers that
  // drive the state without turning the loop (benches, tests).
  void CommitNow();

  // Called once when a commit fails (after the parked replies were failed):
  // the owner stops the process, with kExitStorageFailure when the store
  // failed (store().failed()), else with kExitInternalError: the store
  // refused a batch as input, which Submit's checks make a bug.
  void SetFatalHandler(std::function<void(const Status&)> handler) { on_fatal_ = std::move(handler); }
  // HA mode: every write must also pass `replicator` (a durability stage)
  // before its replies leave. Set once, before the first Submit; null:
  // single node (the default), nothing of this runs.
  void SetReplicator(JournalReplicator* replicator);
  // The replicator failed (leadership lost, fenced, etcd refused): fail-stop
  // as after a failed commit; replication_failed() tells the owner's exit code.
  void ReplicationFailed(const Status& status) {
    if (failed()) return;
    replication_failed_ = true;
    FailStop(status);
  }
  bool replication_failed() const { return replication_failed_; }
  // Told of every update Submit applied, right after it applied (metrics
  // that time transitions: ClosureTimings). Must not Submit.
  void SetAppliedObserver(std::function<void(journal::Update::Reader)> observer) {
    on_applied_ = std::move(observer);
  }

  // Writes a snapshot of the current (committed) state now, on this thread
  // (clean shutdown, tests). A background one in flight is then stale: its
  // file is removed when it comes back.
  Status Snapshot();
  // True while a background snapshot task runs on the thread pool.
  bool snapshot_in_flight() const { return snapshotter_ != nullptr && snapshotter_->in_flight(); }
  // Asks a background snapshot in flight to stop soon (shutdown).
  void CancelSnapshot() {
    if (snapshotter_ != nullptr) snapshotter_->Cancel();
  }
  // Test hook: the next background snapshots fail at `fault`.
  void set_snapshot_fault_for_testing(SnapshotFault fault);
  // True while a checkpoint runs on the thread pool.
  bool checkpoint_in_flight() const { return checkpoint_.in_flight(); }
  // Commits (and the loop's other writes) wait for a checkpoint: its pass
  // that restarts the WAL runs, or a pass that copied the whole WAL has not
  // come back yet (the next write would restart the WAL on the loop).
  bool commits_held() const;
  // True while a WAL fsync runs on the thread pool.
  bool sync_in_flight() const { return sync_ != nullptr && sync_->in_flight(); }
  // True when nothing written is waiting for its fsync.
  bool all_durable() const { return sync_ == nullptr || sync_->all_durable(); }
  // The WAL fsyncs (zero without a deferred fsync).
  const SyncStats& sync_stats() const;
  // One deferred fsync, start to done (empty without a deferred fsync).
  const Histogram& sync_seconds() const;
  // True while work of ours that writes much to the disk runs on the thread
  // pool: a snapshot, a checkpoint, the unlink of a snapshot file or a file
  // write another component announced. A WAL fsync then waits behind that
  // I/O (ext4's ordered journal writes the other files' data first), so it
  // does not run on the loop meanwhile.
  bool disk_busy() const;
  // The count of another component's file writes (closure result files)
  // running on the thread pool: it raises it as one starts and lowers it as
  // one ends. Shared, so that it may outlive either side.
  std::shared_ptr<uint64_t> pool_file_writes() const { return pool_file_writes_; }
  // Test hook: the next WAL fsync fails (fail-stop follows).
  void fail_next_sync_for_testing() {
    if (sync_ != nullptr) sync_->fail_next_sync_for_testing();
  }
  // The shutdown step before the Store closes: starts no more background
  // snapshots or checkpoints, cancels a snapshot in flight, and resolves
  // once no work of ours is left on the thread pool (at once if none is; a
  // WAL fsync in flight is let finish, so its replies leave; result reads
  // waiting are rejected, the running one let finish). Commits go on
  // meanwhile. Idempotent; one waiter at a time.
  // REQUIRES: a KJ event loop on this thread.
  kj::Promise<void> StopBackgroundWork();
  bool background_stopped() const { return background_stopped_; }
  bool failed() const { return !failure_.ok(); }
  const Status& failure() const { return failure_; }
  const DurableStats& stats() const { return stats_; }
  // When the last successful commit started and ended (uv_hrtime
  // nanoseconds; 0 before the first): closure traces (ClosureOutcome.trace).
  uint64_t last_commit_start_ns() const { return last_commit_start_ns_; }
  uint64_t last_commit_end_ns() const { return last_commit_end_ns_; }
  const DurableHistograms& histograms() const { return histograms_; }
  storage::Store& store() { return store_; }
  const storage::Store& store() const { return store_; }

 private:
  DurableState(uv_loop_t* loop, storage::Store& store, DurableStateOptions options);

  Status Replay();
  // Recover's two endings: with a standby's live state, and the part both share.
  static Result<std::unique_ptr<DurableState>> AdoptLive(std::unique_ptr<DurableState> self,
                                                         std::unique_ptr<state::DispatcherState> live,
                                                         uint64_t start);
  static Result<std::unique_ptr<DurableState>> FinishRecovery(std::unique_ptr<DurableState> self, uint64_t start);
  // Deletes stored results the state does not hold (left by a reset, which
  // forgets closures without releasing them), rows in one transaction, and
  // removes result files no finished closure holds (see result_file.h);
  // the files it keeps become result_files_.
  Status DropUnheldResults();
  void FailStop(const Status& status);
  // What the stages report (stage_listener_).
  void OnStageAdvanced();
  void OnStageFailed(const Status& status);
  struct StageListener final : DurabilityListener {
    explicit StageListener(DurableState& owner) : owner(owner) {}
    void OnStageAdvanced() override { owner.OnStageAdvanced(); }
    void OnStageFailed(const Status& status) override { owner.OnStageFailed(status); }
    DurableState& owner;
  };
  StageListener stage_listener_{*this};
  // A write reached the store: it gets the next write number, `group` waits
  // for it, and every stage is told (`batch`: the group commit it is, null
  // for another write). Then releases what is durable.
  void NoteWrite(DurableWaiters group, const storage::Batch* batch, uint64_t first_seq);
  // The last write every stage has passed (written_ when there is none).
  uint64_t DurableThrough() const;
  // Releases the waiting groups every stage has passed.
  void ReleaseDurable();
  // Submit once the record bytes are made.
  Status SubmitRecord(journal::Update::Reader update, std::string bytes);
  // The refusal of an update whose record takes `bytes`; ok when it fits.
  Status CheckRecordBytes(journal::Update::Reader update, size_t bytes) const;
  struct CheckpointJob;
  void MaybeCheckpoint();
  // `remainder`: the pass that copies what the last one could not, with
  // commits held (writes_held_) until it is back.
  // False when the pool refused it (nothing runs).
  bool StartCheckpoint(bool remainder);
  void OnCheckpointDone(std::unique_ptr<CheckpointJob> job);
  // Hands a snapshot outcome held by commits_held() to OnSnapshotDone.
  void RecordHeldSnapshot();
  // Writes the batch now. REQUIRES: !failed(), batch not empty.
  void CommitBatch();
  void MaybeSnapshot();
  // Fulfils the StopBackgroundWork() waiter once nothing is in flight.
  void WakeStopWaiter();
  // A checkpoint, snapshot, WAL fsync or result read runs on the pool.
  bool BackgroundWorkInFlight() const;
  void OnSnapshotDone(SnapshotOutcome outcome);
  void OnSnapshotDoneLocally(SnapshotOutcome& outcome);
  void RemoveSnapshotFiles(const std::vector<std::string>& names);

  uv_loop_t* const loop_;
  storage::Store& store_;
  const DurableStateOptions options_;
  state::DispatcherState state_;
  storage::Batch batch_;
  // Definitions put in this pass, readable before their commit.
  std::map<std::string, std::string> pending_datasets_;
  // Results put in this pass: closure id -> index in batch_.result_puts().
  std::map<uint64_t, size_t> pending_results_;
  // Results kept in files: closure id -> the attempt that wrote it.
  std::map<uint64_t, uint32_t> result_files_;
  // Replies parked on this pass's batch, not written yet. They get a write
  // number only when the batch commits, never earlier: a write numbered
  // before (a snapshot's record, while the batch waited for its commit) may
  // become durable before the batch is even written, so it must not release
  // them. (Found by the power-loss suite: replies released before their
  // records were even written.)
  DurableWaiters batch_waiters_;
  // The last write numbered (group commits and snapshot records).
  uint64_t written_ = 0;
  // Groups waiting for their write to pass every stage, by write number.
  std::deque<std::pair<uint64_t, DurableWaiters>> waiting_;
  // The stages, in the order they are told of a write: the WAL fsync
  // (sync_), the replicated journal (HA mode).
  std::vector<DurabilityStage*> stages_;
  std::unique_ptr<SyncStage> sync_;
  // Snapshot files being unlinked on the thread pool. Shared with each
  // request, which may come back after this object is gone.
  std::shared_ptr<uint64_t> unlinks_in_flight_ = std::make_shared<uint64_t>(0);
  std::shared_ptr<uint64_t> pool_file_writes_ = std::make_shared<uint64_t>(0);
  std::unique_ptr<storage::Checkpointer> checkpointer_;
  // Reads stored results off the loop; made at recovery.
  std::unique_ptr<ResultReads> result_reads_;
  std::unique_ptr<SnapshotReplica> snapshotter_;
  // Record after which the last snapshot started (or was recorded).
  uint64_t last_snapshot_start_seq_ = 0;
  uint64_t snapshot_not_before_ns_ = 0;  // retry delay after a failure
  // The checkpoint in flight: it holds checkpointer_ while it runs.
  uvkj::PoolWork<CheckpointJob> checkpoint_;
  bool writes_held_ = false;  // a remainder checkpoint runs: commit nothing
  // A snapshot that ended while commits_held(): recorded when they are not.
  std::optional<SnapshotOutcome> held_snapshot_outcome_;
  bool background_stopped_ = false;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> stop_waiter_;
  Status failure_;
  JournalReplicator* replicator_ = nullptr;
  bool replication_failed_ = false;
  std::function<void(const Status&)> on_fatal_;
  DurableStats stats_;
  DurableHistograms histograms_;
  std::function<void(journal::Update::Reader)> on_applied_;
  uint64_t checkpoint_start_ns_ = 0;
  uint64_t hold_deadline_ns_ = 0;  // 0: no hold
  uint64_t last_commit_start_ns_ = 0;
  uint64_t last_commit_end_ns_ = 0;
  void StartCommitTimer();
  // Ticks while a hold is on so that an expired hold commits even when the
  // loop has nothing else to do.
  std::unique_ptr<uvkj::UvRepeatingTimer> hold_timer_;
  // Deletes the released result rows the last commits left
  // (Store::DeleteReleasedRows) while no commit comes to take them.
  std::unique_ptr<uvkj::UvRepeatingTimer> delete_timer_;
  void StartDeleteTimer();
  void OnDeleteTimer();
};

// Update encoding for the journal: a flat Cap'n Proto message.
std::string EncodeUpdate(journal::Update::Reader update);

}  // namespace dispatch::reactor
