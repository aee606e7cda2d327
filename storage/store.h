// Store: the dispatcher's durable memory in the work dir: one SQLite file (WAL
// mode) with the journal (records with contiguous sequence numbers and CRC32C
// checksums), the dataset store, the closure results (by closure id; snapshots
// do not touch them) and the name of the latest snapshot, plus that
// snapshot in a file of its own (snapshot_file.h). Invariants: journal records
// present are exactly journal_first_seq() .. last_seq(), with
// journal_first_seq() <= snapshot_seq() + 1: records up to snapshot_seq() are
// covered by the snapshot and are deleted in bounded slices inside later
// commits, never all at once; start-up loads the snapshot file the database
// names (missing or damaged: DataLoss naming the file) and replays the records
// after it; snapshot files the database does not name are leftovers of an
// interrupted snapshot and are removed at Open. Nothing is acknowledged before
// its transaction committed; after one failed write the Store refuses every write.
//
// Durability, FULL vs NORMAL (docs/operators/durability.md). With synchronous=FULL (the default)
// every Commit fsyncs the WAL before it returns, so an acknowledged change
// survives a kill -9 and a power loss on a disk that honours fsync; it costs one
// fsync per group commit, which on ordinary SSDs and VMs bounds the commit rate
// to a few hundred or thousand transactions per second (group commit amortises
// it over every Update of a loop pass). With synchronous=NORMAL the WAL is
// fsynced only at checkpoints: commits are much cheaper and a kill -9 of the
// dispatcher still loses nothing (the data is in the OS page cache), but a power
// loss or kernel crash can lose the most recent acknowledged transactions (back
// to the last checkpoint). The database never becomes corrupt in either mode.
//
// Damage SQLite cannot see, and how start-up tells it from a clean end.
// SQLite trusts whatever the files say: a deleted last row, a WAL cut in the
// middle of a frame (it stops at the last valid commit), a WAL deleted after
// a checkpoint copied part of it (the database alone looks whole) all open
// without an error, and the journal simply ends early. The journal cannot
// tell by itself whether its end is where it should be; something outside the
// lost part must say how far it reached. That is COMMITTED (commit_mark.h),
// the high-water mark: after every commit the Store overwrites one of its
// two slots with the last sequence number, with a pwrite and NO fsync. Why
// no fsync is needed:
//  - kill -9 (no machine crash): the page cache survives, so the mark is
//    exactly the last value written, and the WAL holds everything committed
//    before it. A journal that ends below the mark is damage, always.
//  - Power loss, FULL (or defer_sync, where DurableState calls NoteDurable
//    after each WalSyncer::Sync, before the replies leave): the mark is
//    written only after the records it names were fsynced, so whichever
//    version of the mark reaches the disk (old or new; a torn slot leaves
//    the other), it never claims more than the disk holds: a journal below
//    it is damage too. Unacknowledged commits lost in a torn WAL tail are
//    below the mark and refuse nothing.
//  - Power loss, NORMAL: the mark is written before any fsync and may reach
//    the disk while the WAL tail does not; that loss is NORMAL's documented
//    cost. The mark carries the writer's boot id (/proc's boot_id): a
//    shortfall under a non-synced mark is refused when the machine has not
//    restarted since (then nothing but damage can explain it), and accepted
//    with a warning naming the lost records when it has.
// So Open refuses (DataLoss naming the missing records and the file that
// says so) a journal that ends below a trusted mark. The costs: one 32-byte
// pwrite per commit into a file that only ever has two blocks (no
// allocation, no size change); the mark may lag (a kill -9 between commit
// and pwrite): a lagging mark is only a weaker check, never a false refusal.
// A missing COMMITTED (a work dir of an older version, or deleted) is
// accepted with a warning and written from then on; one with no valid slot
// is DataLoss. The mark is reset only when Open creates a fresh schema.
// Row damage inside a table SQLite reads fine is caught by the per-row
// CRC32C (format.h): journal records at replay (every record is replayed at
// start), the snapshot file at load, and every dataset definition at Open
// (VerifyDatasets: definitions are small; before, a flipped one showed only
// when that dataset was read). Closure results are checked on every read
// and never served damaged, but not read at start (they can be gigabytes):
// `dispatcher --verify` (verify.h) checks them all offline, with SQLite's
// integrity_check, every record, the snapshot, every definition and the mark.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/journal_batch.h"
#include "storage/checkpointer.h"
#include "storage/commit_mark.h"
#include "storage/database_backup.h"
#include "storage/journal_reader.h"
#include "storage/journal_writer.h"
#include "storage/result_file.h"
#include "storage/result_reader.h"
#include "storage/snapshot_file.h"
#include "storage/sqlite.h"
#include "storage/tables_reader.h"
#include "storage/wal_syncer.h"

namespace dispatch::storage {

class WorkDirLock;

enum class Synchronous {
  kFull,    // fsync the WAL at every commit (default): survives power loss.
  kNormal,  // fsync only at checkpoints: survives a process crash, not power loss.
};

struct StoreOptions {
  // Created if missing. Holds LOCK, dispatch.db (+ -wal, -shm), INITIALIZED, COMMITTED,
  // the snapshot file (snapshot-*.snap) and results/ (result_file.h).
  std::string work_dir;
  Synchronous synchronous = Synchronous::kFull;
  // Per-item limits, checked before anything is written (ResourceExhausted,
  // and the Store stays usable: bad input is not a storage failure).
  size_t max_record_bytes = 16u << 20;
  size_t max_dataset_bytes = 64u << 20;
  size_t max_snapshot_bytes = 512u << 20;
  size_t max_result_bytes = 256u << 20;
  // Each Commit deletes at most this many journal records that the latest
  // snapshot covers, in its own transaction: truncation after a snapshot is
  // spread over later commits instead of one long delete on the loop thread.
  uint64_t truncate_records_per_commit = 2048;
  // ... and, past the slice's first record, at most this many bytes of them,
  // or twice what the commit itself writes if that is more (so truncation
  // keeps pace with the journal's growth). A count alone does not bound the
  // delete: 200 snapshot-covered records of 20 KiB each deleted in one
  // commit held the loop 85 ms (cache spill into the WAL). 0: no byte bound.
  uint64_t truncate_bytes_per_commit = 128u << 10;
  // The result rows a batch deletes (releases) are queued and deleted a
  // slice per commit, in its transaction: at most this many bytes of them
  // (at least one row). Deleting a row reads every page of it (SQLite walks
  // its overflow chain): 64 released rows of 256 KiB deleted in one commit
  // held the loop 13-27 ms. The rest waits for the next commit or
  // DeleteReleasedRows(); a crash leaves them to the next start, which
  // deletes the rows no closure holds. 0: every one with its batch.
  uint64_t result_delete_bytes_per_commit = 1u << 20;
  // WantsCheckpoint() turns true once the WAL holds this many frames (pages)
  // not yet copied into the database.
  int checkpoint_wal_frames = 2048;
  // FinishCheckpoint pauses the loop to copy what an off-loop checkpoint could
  // not (frames committed while it ran) only once the WAL is this long; below
  // it the WAL restarts by itself after any checkpoint no commit raced, i.e.
  // at the first lull. 2048 frames = 8 MiB with 4 KiB pages. Kept short on
  // purpose: a restarted WAL overwrites blocks the file already has, and an
  // fdatasync of an overwrite skips the size and allocation update an append
  // needs (measured here: 280 against 350 us per commit).
  int wal_restart_frames = 2048;
  // ... and only if that remainder is at most this many frames (256 = 1 MiB:
  // a pause of about two fsyncs), unless the WAL has reached twice
  // wal_restart_frames: then it copies whatever remains, so the WAL stays
  // bounded even when the loop commits faster than a checkpoint can finish.
  int inline_checkpoint_max_frames = 256;
  // After a checkpoint let SQLite restart the WAL, the next commit truncates
  // the file to this size (PRAGMA journal_size_limit), so one burst (a big
  // snapshot) does not keep a big WAL file forever.
  uint64_t wal_size_limit_bytes = 64u << 20;
  // With kFull, Open extends the WAL file with zeros to wal_restart_frames
  // frames (at most wal_size_limit_bytes) and syncs it once, so that commits
  // overwrite blocks the file already has, as they do anyway once SQLite
  // restarts the WAL after a checkpoint: an fdatasync of an append also
  // writes the file's size and block map, about twice the cost on ext4.
  // Zeros after the last frame are no frame to SQLite (a frame carries the
  // WAL header's salts and a running checksum).
  bool preallocate_wal = true;
  // With kFull only: Commit and RecordSnapshot return once their transaction
  // is in the WAL (the OS page cache) without waiting for its fsync (the
  // connection runs synchronous=NORMAL). The caller must make it durable with
  // a WalSyncer (NewWalSyncer; run off the loop thread) and see that Sync()
  // succeed before it acknowledges anything of it or removes a file it made
  // obsolete; a failed Sync() goes to FailSync (fail-stop). Durability after
  // that Sync is the same as kFull's: the WAL holds each commit, synced.
  // WriteSnapshot syncs by itself. The dispatcher runs with this on (the
  // loop keeps serving while the disk syncs); false keeps every write
  // synchronous, as the Store's own tests and benches expect.
  bool defer_sync = false;
  // Cap on the database size (PRAGMA max_page_count); 0 = no cap. Reaching it
  // fails the commit like a full disk does (fail-stop).
  uint64_t max_db_bytes = 0;
  // How long a statement waits for a SQLite lock before failing. Only the
  // Checkpointer's connection ever shares the file, and its PASSIVE
  // checkpoints never take the write lock, so this is a safety net.
  int busy_timeout_ms = 1000;
};

struct Snapshot {
  uint64_t seq = 0;   // the snapshot holds the state after record `seq`
  std::string bytes;  // opaque to storage
  std::string file;   // the file it was read from (name inside the work dir)
};

// Called once per journal record, in order. `bytes` is valid only during the
// call and is not aligned. A non-ok return stops the replay and is returned
// (its message prefixed with the sequence number).
using RecordFn = std::function<Status(uint64_t seq, std::string_view bytes)>;

// Threading: every method REQUIRES the loop thread (the thread that called
// Open), except that the Checkpointer made by NewCheckpointer, the
// JournalReader made by NewJournalReader and the WalSyncer made by
// NewWalSyncer each run on any one other thread. The Store holds no mutex and shares no SQLite object with it.
class Store final : public JournalWriter {
 public:
  // Creates the work dir if missing, locks it (FailedPrecondition naming the dir
  // and the holder's pid if another dispatcher has it), opens or creates
  // dispatch.db in WAL mode and checks it: a damaged file is DataLoss naming
  // it, never a crash; a journal that does not go on right after the latest
  // snapshot is DataLoss naming the missing sequence numbers. A database of
  // format version 1 (snapshot in a table) is migrated to files. Snapshot
  // files the database does not name are removed.
  static Result<std::unique_ptr<Store>> Open(StoreOptions options);

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  // Closes the connection (SQLite then checkpoints the WAL if no Checkpointer
  // connection is open; destroy the Checkpointer first) and releases the lock.
  ~Store();

  // Appends the batch's records (sequence numbers last_seq()+1 ...), its
  // dataset puts and its result puts and deletes in ONE transaction and
  // returns the new last_seq(). In the same transaction it deletes the next
  // slice (at most options.truncate_records_per_commit records and
  // truncate_bytes_per_commit bytes) of journal records the latest snapshot
  // covers. Returns only after the transaction committed (and,
  // with kFull, was fsynced; with defers_sync(), the caller syncs it).
  // Oversized record/definition/result or an empty dataset key: ResourceExhausted /
  // InvalidArgument, nothing written, Store still usable. Any SQLite failure
  // while writing, committing or syncing: the Store becomes failed (fail-stop)
  // and this and every later Commit/RecordSnapshot/WriteSnapshot return that
  // same error. An empty batch writes nothing and returns last_seq().
  Result<uint64_t> Commit(const JournalBatch& batch) override;

  // Calls `fn` for every journal record with seq > after_seq, in order.
  // REQUIRES: snapshot_seq() <= after_seq <= last_seq() (FailedPrecondition /
  // InvalidArgument otherwise: records up to snapshot_seq() only exist inside
  // the snapshot). A record whose checksum fails, or a missing sequence number,
  // is DataLoss naming the sequence number. `fn` must not call Commit or
  // WriteSnapshot.
  Status Replay(uint64_t after_seq, const RecordFn& fn);

  // Snapshots, the protocol. (1) Someone writes the state after record `seq`
  // with WriteSnapshotFile (any thread or process; the reactor's snapshot
  // replica does it on the thread pool). (2) On the loop thread, RecordSnapshot names that file in one
  // short transaction, from then on start-up loads it. (3) Later commits
  // delete the journal records it covers, a slice each. (4) The caller
  // removes the files RecordSnapshot returned (older snapshots, no longer
  // named). A crash between any two steps leaves either the older snapshot
  // (and its journal) or the newer one named, and at most files that Open
  // removes.

  // Names `info`'s file as the latest snapshot, forgets older snapshots, and
  // returns the names of the files no longer needed (the caller removes them,
  // off the loop if it likes). REQUIRES: snapshot_seq() <= info.seq <=
  // last_seq() (InvalidArgument otherwise, nothing written), the file is
  // durable in the work dir. SQLite failures are fail-stop, as for Commit.
  // With defers_sync() the record is not durable yet: remove the returned
  // files only after a WalSyncer::Sync() that began after this returned.
  Result<std::vector<std::string>> RecordSnapshot(const SnapshotFileInfo& info);

  // WriteSnapshotFile + RecordSnapshot + removing the older files, all on the
  // calling thread (start-up, shutdown, tests). Over max_snapshot_bytes:
  // ResourceExhausted; a file that cannot be written: Unavailable; neither
  // is fail-stop (the journal still holds everything). With defers_sync() it
  // syncs the WAL itself before removing anything (a failed sync is
  // fail-stop), which also makes every earlier commit durable.
  Status WriteSnapshot(uint64_t seq, std::string_view bytes);

  // HA mode's takeover (docs/high_availability.md §5): makes an empty store
  // (no record, no snapshot: a fresh ha-cache) hold the snapshot `bytes` of
  // the state after record `seq`, with `tables`' dataset definitions and
  // closure results as stored at that record, so the journal goes on at
  // seq+1. `tables` carries no records. FailedPrecondition when the store is
  // not empty; the limits of Commit and WriteSnapshot apply (nothing
  // written). SQLite failures are fail-stop, as for Commit.
  Status InstallSnapshot(uint64_t seq, std::string_view bytes, const JournalBatch& tables);

  // The latest snapshot, nullopt if none was recorded; DataLoss naming the
  // file if it is missing or damaged. Start-up = this + Replay(its seq).
  Result<std::optional<Snapshot>> LoadLatestSnapshot();

  // The definition stored under `key`; NotFound naming the key; DataLoss if
  // its checksum fails.
  Result<std::string> GetDataset(std::string_view key);

  // The closure result stored under `closure_id`, read with incremental blob
  // I/O (no intermediate copy). NotFound naming the closure when there is
  // none; DataLoss naming the closure when its checksum fails. Never returns
  // damaged bytes.
  Result<std::string> GetResult(uint64_t closure_id);
  // The result at `location` (a row or a result file), checked against the
  // CRC32C the journal recorded: ReadResultAt (result_reader.h) through this
  // connection.
  Status ReadResultAt(const ResultLocation& location, char* dest);
  // Ids of every stored result, in order (start-up drops the ones the state
  // does not hold, e.g. after a reset).
  Result<std::vector<uint64_t>> ListResults();
  // Released result rows not deleted yet (result_delete_bytes_per_commit).
  bool HasRowsToDelete() const { return !rows_to_delete_.empty(); }
  // Deletes the next slice of them in a transaction of its own, with no
  // journal record (its fsync is the next commit's: rows a crash brings
  // back are deleted at the next start). A SQLite failure is fail-stop.
  Status DeleteReleasedRows();

  // Checkpoints, the protocol (see also checkpointer.h):
  //   1. After a commit, if WantsCheckpoint(), the reactor runs
  //      Checkpointer::Checkpoint() on the thread pool (uv_queue_work), at most
  //      one at a time, and keeps committing meanwhile.
  //   2. In the after-work callback (loop thread) it calls
  //      FinishCheckpoint(stats) with the result.
  // Why step 2: SQLite can only restart the WAL from its beginning when a
  // checkpoint has copied every frame, but under steady load the loop commits
  // new frames while the off-loop checkpoint runs (each checkpoint fsyncs), so
  // it never catches up and the WAL file would grow without bound.
  // FinishCheckpoint copies that remainder on the loop thread, a short and
  // bounded pause, once the WAL is long enough to be worth it (see
  // StoreOptions.wal_restart_frames / inline_checkpoint_max_frames).

  // True when the WAL holds at least options.checkpoint_wal_frames frames not
  // yet copied into the database, as reported by SQLite's WAL hook after our
  // commits and by FinishCheckpoint (right after Open: estimated from the size
  // of a WAL left by the previous run).
  bool WantsCheckpoint() const {
    return wal_frames_ - backfilled_frames_ >= options_.checkpoint_wal_frames;
  }
  // Frames in the WAL (since its last restart) and, of those, frames known to
  // be copied into the database.
  int wal_frames() const { return wal_frames_; }
  int backfilled_frames() const { return backfilled_frames_; }
  // Commits of this connection that restarted the WAL (and so synced its new
  // header on this thread), the first commit after Open aside. A restart by
  // the Checkpointer (RestartWal, handed to NoteCheckpoint) is not one.
  uint64_t wal_restarts_on_loop() const { return wal_restarts_on_loop_; }

  // REQUIRES: loop thread; `done` is what the Checkpointer's Checkpoint()
  // returned, and no checkpoint is running now. Records its progress and, by
  // the rule in StoreOptions, may copy the frames it could not copy here (one
  // PASSIVE checkpoint on the Store's connection), so the next commit restarts
  // the WAL. Returns the inline pass's stats (passes == 0 if none ran). A
  // failure loses nothing (the WAL still holds every commit) and does not
  // fail-stop the Store.
  Result<CheckpointStats> FinishCheckpoint(const CheckpointStats& done);
  // FinishCheckpoint without its inline pass, for a caller that copies the
  // remainder off the loop thread: records `done`'s progress and returns
  // true when, by the rule in StoreOptions, the rest of the WAL should be
  // copied now, i.e. by another Checkpointer::Checkpoint() with no commit
  // between its start and the next commit (which then restarts the WAL).
  // Hand that pass's result here too (its return value then only says
  // whether the pass fell short), and RestartWal's: a WAL restarted there
  // starts its count again.
  bool NoteCheckpoint(const CheckpointStats& done);
  // Every frame of the WAL is in the database (as far as the WAL hook and
  // the checkpoints handed to NoteCheckpoint tell): the next write restarts
  // the WAL, which Checkpointer::RestartWal can do off the loop thread.
  bool WalFullyCopied() const {
    return wal_frames_known_ && wal_frames_ > 0 && backfilled_frames_ >= wal_frames_;
  }

  // A Checkpointer with its own connection to this database. Made on the loop
  // thread while the Store (and so the lock) is alive; see checkpointer.h.
  Result<std::unique_ptr<Checkpointer>> NewCheckpointer();
  // True when Commit and RecordSnapshot leave their fsync to the caller
  // (StoreOptions.defer_sync with kFull).
  bool defers_sync() const {
    return options_.defer_sync && options_.synchronous == Synchronous::kFull;
  }
  // A WalSyncer of this database's WAL (see wal_syncer.h), with a descriptor
  // of its own: it may run on another thread while the loop thread commits.
  // It holds nothing but that descriptor, so it may outlive the Store (a
  // sync given up at shutdown ends on the thread pool by itself).
  Result<std::unique_ptr<WalSyncer>> NewWalSyncer();
  // Records a failed WalSyncer::Sync(): the Store becomes failed (fail-stop),
  // as after a failed COMMIT, and returns `status`. Nothing written since the
  // last successful sync may be acknowledged, now or later.
  Status FailSync(Status status) { return FailStop(std::move(status)); }

  // Records that every journal record up to `seq` is durable: a
  // WalSyncer::Sync() that began after the Commit of record `seq` returned
  // succeeded. Moves the high-water mark (COMMITTED, see the top of this
  // file) to `seq`, synced, without an fsync; call it before acknowledging
  // what that Sync covered. Only with defers_sync(): otherwise Commit and
  // WriteSnapshot move the mark themselves.
  void NoteDurable(uint64_t seq);
  // The high-water mark's value now, and how many of its writes failed (a
  // failed write only leaves an older, weaker mark; nothing else changes).
  const CommitMarkValue& commit_mark() const { return mark_->last(); }
  uint64_t commit_mark_write_failures() const { return mark_write_failures_; }
  // What Open accepted but the operator should hear of (a missing mark in a
  // work dir of an older version; records committed with synchronous=normal
  // and lost to a machine restart, named): the caller logs them as warnings.
  const std::vector<std::string>& open_warnings() const { return open_warnings_; }

  // A JournalReader with its own read-only connection to this database; see
  // journal_reader.h. Destroy it before the Store.
  Result<std::unique_ptr<JournalReader>> NewJournalReader();
  // A TablesReader (tables_reader.h), likewise.
  Result<std::unique_ptr<TablesReader>> NewTablesReader();
  // An online copy of the database into the new file `dest_path`, stepped
  // on this thread between commits (database_backup.h): what it holds once
  // complete is the database as of the last Commit before that. Destroy it
  // before the Store. FailedPrecondition after a failed write (fail-stop).
  Result<std::unique_ptr<DatabaseBackup>> StartBackup(const std::string& dest_path);

  uint64_t last_seq() const override { return last_seq_; }
  // The lowest journal record still present (last_seq()+1 when none is).
  uint64_t journal_first_seq() const { return journal_first_seq_; }
  // Records the latest snapshot covers that later commits still have to delete.
  uint64_t pending_truncation() const {
    return snapshot_seq_ >= journal_first_seq_ ? snapshot_seq_ - journal_first_seq_ + 1 : 0;
  }
  // 0 when there is no snapshot (has_snapshot() false).
  uint64_t snapshot_seq() const { return snapshot_seq_; }
  // The recorded snapshot file (name, size, checksum), if any.
  const std::optional<SnapshotFileInfo>& latest_snapshot() const { return latest_snapshot_; }
  bool has_snapshot() const { return has_snapshot_; }
  // Records in the journal, i.e. since the latest snapshot; the reactor
  // snapshots when this passes its configured N.
  uint64_t journal_length() const { return last_seq_ - snapshot_seq_; }

  // Fail-stop state: ok() until a write failed, then the original error.
  const Status& failure() const { return failure_; }
  bool failed() const override { return !failure_.ok(); }
  size_t max_record_bytes() const override { return options_.max_record_bytes; }

  const std::string& db_path() const { return db_path_; }
  // Where large closure results live as files (result_file.h); Open creates it.
  std::string result_dir() const { return options_.work_dir + "/" + kResultDirName; }
  const std::string& work_dir() const { return options_.work_dir; }
  const StoreOptions& options() const { return options_; }

 private:
  explicit Store(StoreOptions options);

  // Open() in steps (store_open.cc).
  Status OpenDatabase();
  Status ConfigureConnection();
  // StoreOptions.preallocate_wal, through SQLite's own handle of the WAL (so
  // a wrapping VFS sees the writes). A full disk only leaves the WAL as it
  // was (an open warning); another failed write or sync fails Open: the disk
  // is failing us before anything was served.
  Status PreallocateWal();
  Status CheckOrCreateSchema();
  // With a deferred fsync: syncs the WAL, so what was committed is durable
  // before the INITIALIZED marker is written.
  Status SyncWalBeforeMarker();
  Status PrepareStatements();
  Status MigrateFromVersion1();
  Status UpgradeFromVersion2();
  // Creates result_dir() if missing (and fsyncs the work dir).
  Status CreateResultDir();
  Status LoadBounds();
  // Compares the journal's end with the high-water mark (COMMITTED) and
  // opens the mark for writing; DataLoss naming the missing records.
  Status CheckCommitMark();
  // Checks the checksum of every dataset definition (DataLoss naming it).
  Status VerifyDatasets();
  Status RemoveStaleSnapshotFiles();
  // Writes the mark after a commit that made `seq` committed (synced or not).
  void WriteMark(uint64_t seq, bool synced);

  Status ValidateBatch(const JournalBatch& batch) const;
  // The last record of the next slice of snapshot-covered records to delete
  // in a commit that writes `batch_bytes` (journal_first_seq_ <= snapshot_seq_).
  Result<uint64_t> TruncationSliceEnd(size_t batch_bytes);
  // `truncate_through`: delete journal records up to it too (0: none).
  Status WriteBatch(const JournalBatch& batch, uint64_t first_seq, uint64_t truncate_through);
  // Deletes the next slice of rows_to_delete_ inside the open transaction.
  Status DeleteRowSlice();
  Status RecordSnapshotTransaction(const SnapshotFileInfo& info, std::vector<std::string>* obsolete);
  // Rolls back whatever is open, records `status` as the failure, returns it.
  Status FailStop(Status status);
  static int OnWalCommit(void* self, sqlite3* db, const char* name, int frames);

  StoreOptions options_;
  std::string db_path_;
  // Declared first: released last, after the connection is closed.
  std::unique_ptr<WorkDirLock> lock_;
  SqliteDb db_;
  // Statements after db_: finalized before the connection closes.
  Statement begin_;
  Statement commit_;
  Statement rollback_;
  Statement insert_record_;
  Statement select_records_;
  Statement insert_snapshot_;
  Statement select_old_snapshots_;
  Statement delete_old_snapshots_;
  Statement truncate_journal_;
  Statement select_record_sizes_;
  Statement select_snapshot_;
  Statement put_dataset_;
  Statement get_dataset_;
  Statement put_result_;
  Statement delete_result_;
  // Released result rows to delete, by closure id (DeleteRowSlice).
  std::set<uint64_t> rows_to_delete_;
  Statement get_result_;
  Statement list_results_;

  uint64_t last_seq_ = 0;
  uint64_t journal_first_seq_ = 1;
  uint64_t snapshot_seq_ = 0;
  bool has_snapshot_ = false;
  std::string snapshot_file_;  // name of the recorded snapshot file, if any
  std::optional<SnapshotFileInfo> latest_snapshot_;
  int64_t page_size_ = 0;  // the database's, read at open
  int wal_frames_ = 0;
  int backfilled_frames_ = 0;
  bool wal_frames_known_ = false;  // wal_frames_ is SQLite's count, not Open's estimate
  uint64_t wal_restarts_on_loop_ = 0;
  bool in_replay_ = false;
  bool created_schema_ = false;  // this Open created the schema (a fresh journal)
  std::unique_ptr<CommitMark> mark_;
  uint64_t mark_write_failures_ = 0;
  std::vector<std::string> open_warnings_;
  Status failure_;
};

}  // namespace dispatch::storage
