#include "reactor/durable_state.h"

#include <sys/time.h>

#include <algorithm>
#include <atomic>

#include <capnp/dynamic.h>
#include <kj/debug.h>

#include "common/log.h"
#include "common/rpc_status.h"
#include "state/codec.h"

namespace dispatch::reactor {
namespace {

int64_t WallClockMicros() {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  return static_cast<int64_t>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

uint64_t MonotonicMicros() { return uv_hrtime() / 1000; }

// The variant's name, e.g. "registerWorker" or "closureBatch.scheduled".
std::string UpdateKind(journal::Update::Reader update) {
  std::string kind = "invalid";
  KJ_IF_MAYBE (field, capnp::toDynamic(update).which()) {
    kind = field->getProto().getName().cStr();
  }
  if (update.isClosureBatch()) {
    KJ_IF_MAYBE (field, capnp::toDynamic(update.getClosureBatch()).which()) {
      kind += std::string(".") + field->getProto().getName().cStr();
    }
  }
  return kind;
}

}  // namespace

std::string EncodeUpdate(journal::Update::Reader update) {
  capnp::MallocMessageBuilder message(update.totalSize().wordCount + 1);
  message.setRoot(update);
  return state::EncodeMessage(message);
}

DurableState::DurableState(uv_loop_t* loop, storage::Store& store, DurableStateOptions options)
    : loop_(loop), store_(store), options_(options), checkpoint_(loop) {}

// The members give their pool work up (a checkpoint goes on with its own
// connection until it is done; nothing is lost either way: the WAL and the
// journal hold every commit).
DurableState::~DurableState() = default;

Result<std::unique_ptr<DurableState>> DurableState::Recover(uv_loop_t* loop, storage::Store& store,
                                                            DurableStateOptions options,
                                                            std::unique_ptr<state::DispatcherState> live) {
  std::unique_ptr<DurableState> self(new DurableState(loop, store, options));
  uint64_t start = MonotonicMicros();
  for (const std::string& warning : store.open_warnings()) {
    Log(LogLevel::kWarning, warning.c_str());
  }
  if (live != nullptr) return AdoptLive(std::move(self), std::move(live), start);

  auto snapshot = store.LoadLatestSnapshot();
  if (!snapshot.ok()) return snapshot.status();
  auto snapshotter = SnapshotReplica::Create(loop, store);
  if (!snapshotter.ok()) return snapshotter.status();
  self->snapshotter_ = std::move(snapshotter).value();
  std::shared_ptr<const std::string> snapshot_bytes;
  if (snapshot->has_value()) {
    snapshot_bytes = std::make_shared<const std::string>(std::move((*snapshot)->bytes));
  }
  // With background snapshots on, the replica is built from the same inputs
  // on a thread of its own meanwhile.
  const bool prime = options.snapshot_every > 0 && options.snapshot_in_background;
  if (prime) {
    self->snapshotter_->StartPriming(snapshot_bytes, store.snapshot_seq(), store.last_seq());
  }
  if (snapshot->has_value()) {
    const storage::Snapshot& snap = **snapshot;
    auto restored = state::DecodeSnapshot(*snapshot_bytes);
    if (!restored.ok()) {
      return DataLossError("snapshot at sequence number " + std::to_string(snap.seq) + ": " +
                           restored.status().message());
    }
    self->state_ = std::move(restored.value());
  }
  snapshot_bytes.reset();

  DISPATCH_RETURN_IF_ERROR(self->Replay());
  DISPATCH_RETURN_IF_ERROR(self->DropUnheldResults());
  if (prime) {
    Status primed = self->snapshotter_->FinishPriming(self->state_.NumApplied());
    if (!primed.ok()) {
      Log(LogLevel::kWarning, "snapshot replica not primed (the first snapshot builds it): ",
          primed.ToString().c_str());
    }
  }
  return FinishRecovery(std::move(self), start);
}

Result<std::unique_ptr<DurableState>> DurableState::AdoptLive(std::unique_ptr<DurableState> self,
                                                              std::unique_ptr<state::DispatcherState> live,
                                                              uint64_t start) {
  // No priming either: joining it would wait for the very replay the live
  // state saves. The first snapshot builds its replica off the loop.
  auto snapshotter = SnapshotReplica::Create(self->loop_, self->store_);
  if (!snapshotter.ok()) return snapshotter.status();
  self->snapshotter_ = std::move(snapshotter).value();
  self->state_ = std::move(*live);
  DISPATCH_RETURN_IF_ERROR(self->DropUnheldResults());
  return FinishRecovery(std::move(self), start);
}

Result<std::unique_ptr<DurableState>> DurableState::FinishRecovery(std::unique_ptr<DurableState> self,
                                                                   uint64_t start) {
  storage::Store& store = self->store_;
  auto checkpointer = store.NewCheckpointer();
  if (!checkpointer.ok()) return checkpointer.status();
  self->checkpointer_ = std::move(checkpointer.value());
  DurableState* raw = self.get();
  self->result_reads_ = std::make_unique<ResultReads>(self->loop_, store.db_path(),
                                                      store.result_dir(),
                                                      [raw]() { raw->WakeStopWaiter(); });
  if (store.defers_sync()) {
    auto syncer = store.NewWalSyncer();
    if (!syncer.ok()) return syncer.status();
    self->sync_ = std::make_unique<SyncStage>(self->loop_, store, std::move(syncer).value(),
                                              self->options_.sync,
                                              [raw]() { return raw->disk_busy(); });
    self->sync_->SetListener(&raw->stage_listener_);
    self->stages_.push_back(self->sync_.get());
  }
  // A long journal left by a crash is snapshotted in the background after
  // the first commit; nobody waits for it.
  self->last_snapshot_start_seq_ = store.snapshot_seq();
  self->stats_.recovery_micros = MonotonicMicros() - start;
  return self;
}

Status DurableState::Replay() {
  return store_.Replay(store_.snapshot_seq(), [this](uint64_t, std::string_view bytes) -> Status {
    // Storage prefixes the error with the record's sequence number.
    Status applied = state::ApplyEncodedUpdate(state_, bytes);
    if (!applied.ok()) return DataLossError("does not apply: " + applied.ToString());
    ++stats_.replayed;
    return Status::Ok();
  });
}

int64_t DurableState::NowMicros() const { return std::max(WallClockMicros(), state_.LastTimeMicros()); }

Status DurableState::Submit(journal::Update::Reader update) {
  return SubmitRecord(update, EncodeUpdate(update));
}

Status DurableState::Submit(journal::Update::Reader update, std::string bytes) {
  // A builder's message may hold unused space that a copy would not; the
  // planners' budgets are exact for the copy.
  if (bytes.size() > max_record_bytes()) bytes = EncodeUpdate(update);
  return SubmitRecord(update, std::move(bytes));
}

Status DurableState::SubmitRecord(journal::Update::Reader update, std::string bytes) {
  if (failed()) return failure_;
  for (DurabilityStage* stage : stages_) DISPATCH_RETURN_IF_ERROR(stage->Admit());
  // Sized before anything else: an update no journal record can hold is
  // refused here and changes nothing. The store checks again at commit, as a
  // last line that input never reaches.
  Status fits = CheckRecordBytes(update, bytes.size());
  if (!fits.ok()) {
    ++stats_.refused_for_size;
    return fits;
  }
  DISPATCH_RETURN_IF_ERROR(MakeRoom(bytes.size()));
  // Apply checks first and changes nothing on error; only an applied update
  // is journaled, and both happen before the pass's commit.
  DISPATCH_RETURN_IF_ERROR(state_.Apply(update));
  batch_.AddRecord(std::move(bytes));
  if (on_applied_) on_applied_(update);
  return Status::Ok();
}

Status DurableState::CheckRecordBytes(journal::Update::Reader update, size_t bytes) const {
  if (bytes <= max_record_bytes()) return Status::Ok();
  return ResourceExhaustedError("update " + UpdateKind(update) + " of " + std::to_string(bytes) +
                                " bytes does not fit a journal record (limit " +
                                std::to_string(max_record_bytes()) + " bytes" +
                                options_.record_limit_reason + "); nothing was changed");
}

Status DurableState::CheckFits(journal::Update::Reader update) const {
  return CheckRecordBytes(update, EncodeUpdate(update).size());
}

Status DurableState::MakeRoom(size_t bytes) {
  if (batch_.empty() || batch_.payload_bytes() + bytes <= options_.max_batch_bytes) {
    return Status::Ok();
  }
  // Replies parked on what is in the batch are released by this commit; a
  // hold (closure reports) only ever delays a commit, never merges two, and
  // a checkpoint never lets the batch pass its bound (a remainder pass then
  // falls short, or the loop restarts the WAL itself).
  ++stats_.early_commits;
  CommitNow();
  return failure_;
}

void DurableState::CommitNow() {
  ReleaseHold();
  writes_held_ = false;
  if (!failed() && !batch_.empty()) CommitBatch();
}

void DurableState::PutDataset(std::string key, std::string definition) {
  pending_datasets_.insert_or_assign(key, definition);
  batch_.PutDataset(std::move(key), std::move(definition));
}

Result<std::string> DurableState::GetDataset(const std::string& key) {
  auto it = pending_datasets_.find(key);
  if (it != pending_datasets_.end()) return it->second;
  return store_.GetDataset(key);
}

Status DurableState::ResetKeepingIds() {
  if (failed()) return failure_;
  if (!batch_.empty()) return FailedPreconditionError("cannot reset the state with updates pending");
  if (state_.NumApplied() == 0) return Status::Ok();
  state::DispatcherState empty = state_.EmptyKeepingCounters();
  std::string bytes = state::EncodeSnapshot(empty);
  DISPATCH_RETURN_IF_ERROR(store_.WriteSnapshot(store_.last_seq(), bytes));
  if (snapshotter_ != nullptr) snapshotter_->Invalidate();
  state_ = std::move(empty);
  ++stats_.snapshots;
  last_snapshot_start_seq_ = store_.last_seq();
  // The forgotten closures' stored results go too.
  return DropUnheldResults();
}

kj::Promise<void> DurableState::Barrier() {
  if (failed()) return ExceptionFromStatus(failure_);
  // The batch is not written yet: its waiters join the commit's group only
  // once that commit is written (CommitPass), so no fsync that began before
  // can release them.
  if (!batch_.empty()) return batch_waiters_.Wait();
  // Everything is written: the caller may have observed any of it.
  if (DurableThrough() >= written_) return kj::READY_NOW;
  if (waiting_.empty() || waiting_.back().first != written_) waiting_.emplace_back(written_, DurableWaiters());
  return waiting_.back().second.Wait();
}

void DurableState::WhenWrittenDurable(kj::Function<void()> action) {
  if (failed()) return;
  if (DurableThrough() >= written_) {
    action();
    return;
  }
  if (waiting_.empty() || waiting_.back().first != written_) waiting_.emplace_back(written_, DurableWaiters());
  waiting_.back().second.WhenDurable(kj::mv(action));
}

void DurableState::SetReplicator(JournalReplicator* replicator) {
  KJ_REQUIRE(replicator_ == nullptr && written_ == 0, "SetReplicator after the first write");
  replicator_ = replicator;
  if (replicator_ == nullptr) return;
  replicator_->SetListener(&stage_listener_);
  stages_.push_back(replicator_);
}

const SyncStats& DurableState::sync_stats() const {
  static const SyncStats kNone;
  return sync_ != nullptr ? sync_->stats() : kNone;
}

const Histogram& DurableState::sync_seconds() const {
  static const Histogram kNone{Histogram::SecondsBounds()};
  return sync_ != nullptr ? sync_->sync_seconds() : kNone;
}

void DurableState::NoteWrite(DurableWaiters group, const storage::Batch* batch, uint64_t first_seq) {
  ++written_;
  // Queued before any stage hears of the write: one may pass it at once
  // (an fsync on the loop, a replicated journal with nothing in flight).
  if (!group.empty()) waiting_.emplace_back(written_, kj::mv(group));
  for (DurabilityStage* stage : stages_) {
    stage->Written(written_, batch, first_seq);
    if (failed()) return;
  }
  ReleaseDurable();
}

uint64_t DurableState::DurableThrough() const {
  uint64_t through = written_;
  for (const DurabilityStage* stage : stages_) through = std::min(through, stage->durable());
  return through;
}

void DurableState::ReleaseDurable() {
  const uint64_t through = DurableThrough();
  while (!waiting_.empty() && waiting_.front().first <= through) {
    DurableWaiters group = kj::mv(waiting_.front().second);
    waiting_.pop_front();
    group.Fulfill();
  }
}

void DurableState::OnStageAdvanced() {
  if (failed()) return;
  ReleaseDurable();
  WakeStopWaiter();
}

void DurableState::OnStageFailed(const Status& status) {
  if (!failed()) FailStop(status);
}

void DurableState::HoldCommit(uint64_t micros) {
  if (hold_deadline_ns_ != 0 || micros == 0) return;
  hold_deadline_ns_ = uv_hrtime() + micros * 1000;
  StartCommitTimer();
}

void DurableState::ReleaseHold() { hold_deadline_ns_ = 0; }

void DurableState::StartCommitTimer() {
  if (hold_timer_ == nullptr) {
    // Ticks while a commit is held, so that it happens on time
    // even when the loop has nothing else to do.
    hold_timer_ = std::make_unique<uvkj::UvRepeatingTimer>(loop_, 1, [this]() { CommitPass(); });
  }
  hold_timer_->Start();
}

void DurableState::CommitPass() {
  const uint64_t now = uv_hrtime();
  if (hold_deadline_ns_ != 0) {
    if (now < hold_deadline_ns_) return;
    ReleaseHold();
  }
  if (failed() || batch_.empty()) {
    if (hold_timer_ != nullptr) hold_timer_->Stop();
    return;
  }
  // The checkpoint's end commits (OnCheckpointDone).
  if (commits_held()) return;
  CommitBatch();
}

void DurableState::CommitBatch() {
  if (hold_timer_ != nullptr) hold_timer_->Stop();
  size_t records = batch_.record_count();
  const uint64_t first_seq = store_.last_seq() + 1;
  const uint64_t commit_start = uv_hrtime();
  Result<uint64_t> committed = store_.Commit(batch_);
  if (!committed.ok()) {
    if (!store_.failed()) {
      // The store refused the batch as input and wrote nothing; it is still
      // usable. Submit sized every record and handlers check definitions,
      // so this is a bug of ours: the state holds updates the journal
      // refused, so nothing more may be acknowledged. Not a storage failure.
      FailStop(InternalError("BUG: the journal refused a batch as input after it was applied: " +
                             committed.status().ToString()));
      return;
    }
    FailStop(committed.status());
    return;
  }
  last_commit_start_ns_ = commit_start;
  last_commit_end_ns_ = uv_hrtime();
  ++stats_.commits;
  histograms_.commit_seconds.Observe(static_cast<double>(uv_hrtime() - commit_start) * 1e-9);
  histograms_.records_per_commit.Observe(static_cast<double>(records));
  stats_.records += records;
  stats_.max_batch = std::max<uint64_t>(stats_.max_batch, records);
  // The replies leave once every stage has passed this write (at once
  // when there is none: a Store that syncs itself).
  NoteWrite(kj::mv(batch_waiters_), &batch_, first_seq);
  batch_.Clear();
  // What was put in this pass is readable from the store now (the
  // connection sees its own commits, synced or not).
  pending_datasets_.clear();
  pending_results_.clear();

  MaybeSnapshot();
  MaybeCheckpoint();
  if (store_.HasRowsToDelete()) StartDeleteTimer();
}

void DurableState::MaybeSnapshot() {
  // Called right after a commit: the state is exactly the one after
  // store_.last_seq(), nothing uncommitted in it.
  if (options_.snapshot_every == 0 || failed() || !batch_.empty()) return;
  if (store_.last_seq() < last_snapshot_start_seq_ + options_.snapshot_every) return;
  if (!options_.snapshot_in_background) {
    // The old way, kept for comparison: every reply waits for this.
    const uint64_t start = uv_hrtime();
    const uint64_t seq = store_.last_seq();
    if (replicator_ != nullptr) replicator_->SnapshotStarted(seq);
    Status status = Snapshot();
    if (replicator_ != nullptr) {
      replicator_->SnapshotEnded(seq, status.ok() && store_.latest_snapshot().has_value()
                                          ? &*store_.latest_snapshot()
                                          : nullptr);
    }
    SnapshotOutcome outcome;
    outcome.status = status;
    outcome.started_ns = start;
    outcome.total_micros = (uv_hrtime() - start) / 1000;
    outcome.info.seq = store_.snapshot_seq();
    outcome.info.size = stats_.last_snapshot_bytes;
    if (!status.ok()) {
      if (store_.failed()) {
        FailStop(status);
        return;
      }
      ++stats_.snapshot_failures;
      last_snapshot_start_seq_ = store_.last_seq();
      Log(LogLevel::kWarning, "snapshot skipped: ", status.ToString().c_str());
    } else {
      Log(LogLevel::kInfo, "snapshot at record ", outcome.info.seq, " recorded: ", outcome.info.size,
          " bytes, written on the loop thread (--snapshot-in-background=false), total ",
          outcome.total_micros / 1000, " ms");
    }
    if (options_.snapshot_observer) options_.snapshot_observer(outcome);
    return;
  }
  if (background_stopped_ || snapshotter_ == nullptr || snapshotter_->in_flight()) return;
  if (uv_hrtime() < snapshot_not_before_ns_) return;
  const uint64_t seq = store_.last_seq();
  Status started = snapshotter_->Start(seq, state_.NumApplied(), [this](SnapshotOutcome outcome) {
    OnSnapshotDone(std::move(outcome));
    WakeStopWaiter();
  });
  if (!started.ok()) {
    ++stats_.snapshot_failures;
    snapshot_not_before_ns_ = uv_hrtime() + options_.snapshot_retry_ms * 1000000;
    Log(LogLevel::kWarning, "cannot start a snapshot (retrying in ", options_.snapshot_retry_ms,
        " ms): ", started.ToString().c_str());
    return;
  }
  last_snapshot_start_seq_ = seq;
  if (replicator_ != nullptr) replicator_->SnapshotStarted(seq);
}

void DurableState::OnSnapshotDone(SnapshotOutcome outcome) {
  if (commits_held()) {
    // Recording it is a write, and the checkpointer may hold SQLite's write
    // lock for the WAL restart: the loop would wait for it. Recorded when
    // the checkpoint is back.
    held_snapshot_outcome_ = std::move(outcome);
    return;
  }
  OnSnapshotDoneLocally(outcome);
  if (replicator_ == nullptr) return;
  // HA mode: the replicated journal hears whether the store recorded it.
  const auto& recorded = store_.latest_snapshot();
  const bool ok = outcome.status.ok() && recorded.has_value() && recorded->name == outcome.info.name;
  replicator_->SnapshotEnded(outcome.info.seq, ok ? &*recorded : nullptr);
}

void DurableState::OnSnapshotDoneLocally(SnapshotOutcome& outcome) {
  if (outcome.status.ok() && outcome.info.seq < store_.snapshot_seq()) {
    // A newer snapshot was recorded meanwhile (an inline one): this file is
    // of no use.
    RemoveSnapshotFiles({outcome.info.name});
    if (options_.snapshot_observer) options_.snapshot_observer(outcome);
    return;
  } else if (outcome.status.ok()) {
    auto obsolete = failed() ? Result<std::vector<std::string>>(failure_)
                             : store_.RecordSnapshot(outcome.info);
    if (obsolete.ok()) {
      ++stats_.snapshots;
      stats_.last_snapshot_micros = outcome.total_micros;
      histograms_.snapshot_seconds.Observe(static_cast<double>(outcome.total_micros) * 1e-6);
      stats_.last_snapshot_bytes = outcome.info.size;
      // The record naming the new file may not be durable yet: the older
      // files go once every stage has passed it.
      DurableWaiters removal;
      removal.WhenDurable([this, names = std::move(*obsolete)]() { RemoveSnapshotFiles(names); });
      NoteWrite(kj::mv(removal), nullptr, 0);
      Log(LogLevel::kInfo, "snapshot at record ", outcome.info.seq, " recorded: ",
          outcome.info.size, " bytes in ", outcome.info.name.c_str(), "; caught up ",
          outcome.records_applied, " records in ", outcome.catch_up_micros / 1000,
          " ms, encoded and wrote in ", outcome.write_micros / 1000, " ms, total ",
          outcome.total_micros / 1000, " ms");
    } else {
      outcome.status = obsolete.status();
      if (store_.failed() && !failed()) {
        FailStop(obsolete.status());
        return;
      }
    }
  }
  if (!outcome.status.ok()) {
    // Nothing is lost: the journal still holds every record. Try again
    // later, once the journal has grown enough since the recorded snapshot.
    // A file the task wrote before it failed is nobody's.
    const auto& recorded = store_.latest_snapshot();
    if (!outcome.info.name.empty() && (!recorded.has_value() || recorded->name != outcome.info.name)) {
      RemoveSnapshotFiles({outcome.info.name});
    }
    ++stats_.snapshot_failures;
    last_snapshot_start_seq_ = store_.snapshot_seq();
    snapshot_not_before_ns_ = uv_hrtime() + options_.snapshot_retry_ms * 1000000;
    Log(LogLevel::kWarning, "snapshot at record ", outcome.info.seq, " failed (retrying in ",
        options_.snapshot_retry_ms, " ms): ",
        outcome.status.ToString().c_str());
  }
  if (options_.snapshot_observer) options_.snapshot_observer(outcome);
}

void DurableState::RemoveSnapshotFiles(const std::vector<std::string>& names) {
  // Unlinking a big file can take a while: libuv does it on its thread pool.
  // A file left behind by a crash is removed at the next start-up.
  // Who owns the request: libuv, from a successful uv_fs_unlink until its
  // callback, which frees it. Not this object, and it is never cancelled:
  // the request refers to nothing of ours (libuv copies the path), and an
  // unlink of a file nobody needs is worth finishing after we are gone. So
  // there is nothing to give up on destruction; the loop's owner lets it
  // come back before closing the loop (UvLoop::Close()).
  // The request carries a share of the in-flight count, to give back when
  // it is done (on the loop thread, like every use of the count).
  struct Unlink {
    uv_fs_t request;
    std::shared_ptr<uint64_t> in_flight;
  };
  for (const std::string& name : names) {
    auto unlink = std::make_unique<Unlink>();
    unlink->in_flight = unlinks_in_flight_;
    unlink->request.data = unlink.get();
    const std::string path = store_.work_dir() + "/" + name;
    const int rc = uv_fs_unlink(loop_, &unlink->request, path.c_str(), [](uv_fs_t* r) {
      std::unique_ptr<Unlink> owned(static_cast<Unlink*>(r->data));
      --*owned->in_flight;
      uv_fs_req_cleanup(r);
    });
    if (rc == 0) {
      ++*unlinks_in_flight_;
      unlink.release();  // libuv's now; freed by the callback
    }
  }
}

bool DurableState::disk_busy() const {
  return snapshot_in_flight() || checkpoint_.in_flight() || *unlinks_in_flight_ > 0 ||
         *pool_file_writes_ > 0;
}

void DurableState::set_snapshot_fault_for_testing(SnapshotFault fault) {
  if (snapshotter_ != nullptr) snapshotter_->set_fault_for_testing(fault);
}

Status DurableState::Snapshot() {
  if (failed()) return failure_;
  if (!batch_.empty()) return FailedPreconditionError("a snapshot needs every update committed first");
  if (store_.journal_length() == 0) return Status::Ok();
  const uint64_t start = uv_hrtime();
  std::string bytes = state::EncodeSnapshot(state_);
  DISPATCH_RETURN_IF_ERROR(store_.WriteSnapshot(store_.last_seq(), bytes));
  ++stats_.snapshots;
  stats_.last_snapshot_micros = (uv_hrtime() - start) / 1000;
  histograms_.snapshot_seconds.Observe(static_cast<double>(stats_.last_snapshot_micros) * 1e-6);
  stats_.last_snapshot_bytes = bytes.size();
  last_snapshot_start_seq_ = store_.last_seq();
  return Status::Ok();
}

void DurableState::FailStop(const Status& status) {
  failure_ = status;
  Log(LogLevel::kError, replication_failed_ ? "leadership or the etcd journal failed, stopping (fail-stop): "
                                            : "journal commit failed, stopping (fail-stop): ",
      status.ToString().c_str());
  // The parked replies learn the truth; nothing after this is acknowledged.
  batch_waiters_.Reject(status);
  for (auto& [write, group] : waiting_) group.Reject(status);
  waiting_.clear();
  for (DurabilityStage* stage : stages_) stage->Fail(status);
  batch_.Clear();
  pending_datasets_.clear();
  pending_results_.clear();
  if (on_fatal_) on_fatal_(status);
}

// The checkpoint's pool job: it owns the Checkpointer (a connection of its
// own) while it runs, and its result.
struct DurableState::CheckpointJob final : public uvkj::PoolJob {
  void Run() override {
    result = checkpointer->Checkpoint();
    // The loop writes nothing meanwhile: if the WAL is all copied, restart it
    // here, so that the new WAL header's fsync is not the loop's.
    if (remainder && result.ok()) result = checkpointer->RestartWal(*result);
    // Told to the loop before it hears the job is back: it holds its writes
    // from now on (commits_held()).
    if (!remainder && result.ok() && result->complete()) copied_all.store(true, std::memory_order_release);
  }

  std::unique_ptr<storage::Checkpointer> checkpointer;
  // The pass that copies the remainder (or nothing, when the last pass copied
  // everything) and restarts the WAL, while the loop writes nothing.
  bool remainder = false;
  bool restart_only = false;  // ... nothing left to copy: no checkpoint of its own
  // Set on the pool when a first pass copied the whole WAL; read by the loop.
  std::atomic<bool> copied_all{false};
  Result<storage::CheckpointStats> result = InternalError("checkpoint did not run");
};

bool DurableState::commits_held() const {
  if (writes_held_) return true;
  // A checkpoint that copied the whole WAL is on its way back: a write now
  // would restart the WAL here, its header fsync on the loop. Its end
  // starts the pass that restarts it on the pool instead.
  return checkpoint_.in_flight() && checkpoint_.job().copied_all.load(std::memory_order_acquire);
}

void DurableState::MaybeCheckpoint() {
  if (background_stopped_ || checkpointer_ == nullptr || checkpoint_.in_flight() ||
      !store_.WantsCheckpoint()) {
    return;
  }
  StartCheckpoint(/*remainder=*/false);
}

bool DurableState::StartCheckpoint(bool remainder) {
  auto job = std::make_unique<CheckpointJob>();
  job->checkpointer = std::move(checkpointer_);
  job->remainder = remainder;
  job->restart_only = remainder && store_.WalFullyCopied();
  checkpoint_start_ns_ = uv_hrtime();
  if (checkpoint_.Start(job, [this](std::unique_ptr<CheckpointJob> done) {
        OnCheckpointDone(std::move(done));
      }) < 0) {
    checkpointer_ = std::move(job->checkpointer);
    return false;
  }
  // The remainder pass can only finish the WAL if nothing is appended
  // meanwhile: commits wait for it (replies with them; the loop does not).
  writes_held_ = remainder;
  return true;
}

void DurableState::OnCheckpointDone(std::unique_ptr<CheckpointJob> job) {
  checkpointer_ = std::move(job->checkpointer);
  const bool was_remainder = job->remainder;
  writes_held_ = false;
  if (job->result.ok()) {
    if (!job->restart_only) {
      ++stats_.checkpoints;
      histograms_.checkpoint_seconds.Observe(
          static_cast<double>(uv_hrtime() - checkpoint_start_ns_) * 1e-9);
    }
    if (job->result->restarted_wal) ++stats_.wal_restarts_off_loop;
    // Frames committed while the checkpoint ran keep SQLite from restarting
    // the WAL. When the WAL is long the rest is copied by a second pass, on
    // the thread pool like the first, with commits held until it is back.
    // That pass also restarts the WAL, and so does one after a pass that
    // copied everything (nothing to copy then): left to the loop's next
    // commit, the restart's header fsync would hold every reply.
    const bool copy_rest = store_.NoteCheckpoint(*job->result) || store_.WalFullyCopied();
    if (copy_rest && !was_remainder && !background_stopped_ && !failed() &&
        StartCheckpoint(/*remainder=*/true)) {
      return;
    }
  } else {
    // The checkpoint syncs the WAL and the database: a failure is the disk
    // failing us, and after a failed fsync the kernel may have dropped pages
    // of either file, commits not yet acknowledged included (the fsyncgate
    // lesson). Retrying and then trusting a later success would be wrong:
    // fail-stop, as a failed commit or WAL fsync does. The restart recovers
    // from what reached the disk.
    FailStop(store_.FailSync(job->result.status()));
    RecordHeldSnapshot();  // failed now: its file goes, nothing is recorded
    WakeStopWaiter();
    return;
  }
  // What waited for the checkpoint is written now.
  RecordHeldSnapshot();
  WakeStopWaiter();
  CommitPass();
}

void DurableState::RecordHeldSnapshot() {
  if (!held_snapshot_outcome_.has_value()) return;
  SnapshotOutcome outcome = std::move(*held_snapshot_outcome_);
  held_snapshot_outcome_.reset();
  OnSnapshotDone(std::move(outcome));
}

kj::Promise<void> DurableState::StopBackgroundWork() {
  background_stopped_ = true;
  CancelSnapshot();
  if (result_reads_ != nullptr) result_reads_->Stop();
  if (!BackgroundWorkInFlight()) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  stop_waiter_ = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

void DurableState::WakeStopWaiter() {
  if (BackgroundWorkInFlight()) return;
  KJ_IF_MAYBE (waiter, stop_waiter_) { (*waiter)->fulfill(); }
  stop_waiter_ = nullptr;
}

bool DurableState::BackgroundWorkInFlight() const {
  return checkpoint_in_flight() || snapshot_in_flight() || sync_in_flight() ||
         (result_reads_ != nullptr && result_reads_->in_flight());
}

}  // namespace dispatch::reactor
