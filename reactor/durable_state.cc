#include "reactor/durable_state.h"

#include <kj/debug.h>
#include <uv.h>

#include <utility>

#include "common/log.h"
#include "state/codec.h"

namespace dispatch::reactor {
namespace {

uint64_t MonotonicMicros() { return uv_hrtime() / 1000; }

// Every record after the snapshot through the same Apply. Storage prefixes
// an error with the record's sequence number.
Status Replay(storage::Store& store, state::DispatcherState& state, RecoveryStats& stats) {
  return store.Replay(store.snapshot_seq(), [&](uint64_t, std::string_view bytes) -> Status {
    Status applied = state::ApplyEncodedUpdate(state, bytes);
    if (!applied.ok()) return DataLossError("does not apply: " + applied.ToString());
    ++stats.replayed;
    return Status::Ok();
  });
}

}  // namespace

DurableState::DurableState(uv_loop_t* loop, storage::Store& store, DurableStateOptions options)
    : loop_(loop), store_(store), options_(std::move(options)) {}

// The parts give their pool work up (uvkj::PoolWork): a checkpoint goes on
// with its own connection until it is done; nothing is lost either way,
// the WAL and the journal hold every commit.
DurableState::~DurableState() = default;

Result<std::unique_ptr<DurableState>> DurableState::Recover(
    uv_loop_t* loop, storage::Store& store, DurableStateOptions options,
    std::unique_ptr<state::DispatcherState> live) {
  std::unique_ptr<DurableState> self(new DurableState(loop, store, std::move(options)));
  DurableState* raw = self.get();
  const DurableStateOptions& o = self->options_;
  const uint64_t start = MonotonicMicros();
  for (const std::string& warning : store.open_warnings()) Log(LogLevel::kWarning, warning.c_str());

  auto snapshotter = SnapshotReplica::Create(loop, store);
  if (!snapshotter.ok()) return snapshotter.status();
  state::DispatcherState recovered;
  // A hot standby's live state is taken as it is. Priming the replica would
  // wait for the very replay it saves: its first snapshot builds it.
  bool prime = false;
  if (live != nullptr) {
    recovered = std::move(*live);
  } else {
    auto snapshot = store.LoadLatestSnapshot();
    if (!snapshot.ok()) return snapshot.status();
    std::shared_ptr<const std::string> snapshot_bytes;
    if (snapshot->has_value()) {
      snapshot_bytes = std::make_shared<const std::string>(std::move((*snapshot)->bytes));
    }
    // With background snapshots on, the replica is built from the same
    // inputs on a thread of its own meanwhile.
    prime = o.snapshot_every > 0 && o.snapshot_in_background;
    if (prime) {
      (*snapshotter)->StartPriming(snapshot_bytes, store.snapshot_seq(), store.last_seq());
    }
    if (snapshot->has_value()) {
      auto restored = state::DecodeSnapshot(*snapshot_bytes);
      if (!restored.ok()) {
        return DataLossError("snapshot at sequence number " + std::to_string((*snapshot)->seq) +
                             ": " + restored.status().message());
      }
      recovered = std::move(restored.value());
    }
    snapshot_bytes.reset();
    DISPATCH_RETURN_IF_ERROR(Replay(store, recovered, self->recovery_));
  }

  self->pipeline_ = std::make_unique<CommitPipeline>(
      store, SystemClock::Get(),
      CommitPipelineOptions{.max_batch_bytes = o.max_batch_bytes,
                            .record_limit_reason = o.record_limit_reason},
      std::move(recovered));
  CommitPipeline& pipeline = *self->pipeline_;
  self->results_ = std::make_unique<ResultStore>(
      loop, store, pipeline,
      ResultStoreOptions{.result_bytes_per_commit = o.result_bytes_per_commit,
                         .result_file_bytes = o.result_file_bytes},
      [raw]() { raw->WakeStopWaiter(); }, [raw]() { return raw->compaction_->commits_held(); });
  DISPATCH_RETURN_IF_ERROR(self->results_->DropUnheld());
  if (prime) {
    Status primed = (*snapshotter)->FinishPriming(pipeline.state().NumApplied());
    if (!primed.ok()) {
      Log(LogLevel::kWarning, "snapshot replica not primed (the first snapshot builds it): ",
          primed.ToString().c_str());
    }
  }
  auto checkpointer = store.NewCheckpointer();
  if (!checkpointer.ok()) return checkpointer.status();
  // A long journal left by a crash is snapshotted in the background after
  // the first commit; nobody waits for it.
  self->compaction_ = std::make_unique<Compaction>(
      loop, store, pipeline, std::move(snapshotter).value(), std::move(checkpointer).value(),
      CompactionOptions{.snapshot_every = o.snapshot_every,
                        .snapshot_in_background = o.snapshot_in_background,
                        .snapshot_retry_ms = o.snapshot_retry_ms,
                        .snapshot_observer = o.snapshot_observer},
      [raw]() { raw->WakeStopWaiter(); });
  self->backup_ = std::make_unique<OnlineBackup>(
      loop, store, o.backup, [raw](bool paused) { raw->compaction_->PauseCheckpoints(paused); },
      [raw]() { raw->WakeStopWaiter(); });
  self->datasets_ = std::make_unique<DatasetStore>(store, pipeline);
  if (store.defers_sync()) {
    auto syncer = store.NewWalSyncer();
    if (!syncer.ok()) return syncer.status();
    self->sync_ = std::make_unique<SyncStage>(
        loop, store, std::move(syncer).value(), o.sync, [raw]() { return raw->disk_busy(); },
        [raw]() { raw->WakeStopWaiter(); });
    pipeline.AddStage(self->sync_.get());
  }
  pipeline.SetCommitGate([raw]() { return raw->compaction_->commits_held(); },
                         [raw]() { raw->compaction_->CommitsForced(); });
  pipeline.SetHoldTimer([raw](bool on) {
    if (!on) {
      if (raw->hold_timer_ != nullptr) raw->hold_timer_->Stop();
      return;
    }
    if (raw->hold_timer_ == nullptr) {
      raw->hold_timer_ = std::make_unique<uvkj::UvRepeatingTimer>(
          raw->loop_, 1, [raw]() { raw->pipeline_->CommitPass(); });
    }
    raw->hold_timer_->Start();
  });
  self->recovery_.recovery_micros = MonotonicMicros() - start;
  return self;
}

// The end of a loop pass: the event port runs this after every slice of
// KJ work (the RPC calls, the planners' updates, the closure assignment
// pass queued for later in the same slice), before libuv polls again.
void DurableState::EndOfPass() {
  // 1. Commit the pass's batch as one transaction (group commit), unless a
  //    hold (closure reports due within a few passes) or a checkpoint
  //    restarting the WAL defers it. Every reply of the pass is parked on
  //    it, so it comes before the loop sleeps. The commit is handed to the
  //    durability stages at once: a small commit's fsync runs right here
  //    (cheaper than two thread hops when the disk is quick), a larger one
  //    on the pool; replies every stage has passed are released.
  pipeline_->CommitPass();
  // 2. Start a snapshot or a checkpoint when due: only right after the
  //    commit is the state exactly the journal's (a snapshot covers exactly
  //    a committed record), and both run on the pool, after this pass's
  //    fsync has been started, so neither delays its replies.
  compaction_->AfterCommit();
  // 3. Arm the deletion of released result rows, which runs only while no
  //    commit comes to take them a slice at a time.
  results_->AfterCommit();
}

void DurableState::CommitNow() {
  pipeline_->CommitNow();
  compaction_->AfterCommit();
  results_->AfterCommit();
}

Status DurableState::ResetKeepingIds() {
  if (pipeline_->failed()) return pipeline_->failure();
  if (pipeline_->pending()) {
    return FailedPreconditionError("cannot reset the state with updates pending");
  }
  if (state().NumApplied() == 0) return Status::Ok();
  state::DispatcherState empty = state().EmptyKeepingCounters();
  std::string bytes = state::EncodeSnapshot(empty);
  DISPATCH_RETURN_IF_ERROR(store_.WriteSnapshot(store_.last_seq(), bytes));
  compaction_->NoteSnapshotWritten(store_.last_seq());
  pipeline_->ReplaceState(std::move(empty));
  // The forgotten closures' stored results go too.
  return results_->DropUnheld();
}

void DurableState::SetReplicator(JournalReplicator* replicator) {
  KJ_REQUIRE(replicator_ == nullptr && replicator != nullptr, "SetReplicator once");
  replicator_ = replicator;
  pipeline_->AddStage(replicator);
  compaction_->SetReplicator(replicator);
}

void DurableState::ReplicationFailed(const Status& status) {
  if (pipeline_->failed()) return;
  replication_failed_ = true;
  pipeline_->FailStop(status, "leadership or the etcd journal failed");
}

kj::Promise<Result<BackupOutcome>> DurableState::Backup(const std::string& target) {
  if (replicator_ != nullptr) {
    return Result<BackupOutcome>(FailedPreconditionError(
        "this dispatcher runs in HA mode (--etcd): its journal is etcd's and the work dir holds "
        "only a cache of it; back up etcd instead (etcdctl snapshot save)"));
  }
  if (pipeline_->failed()) return Result<BackupOutcome>(pipeline_->failure());
  if (background_stopped_) {
    return Result<BackupOutcome>(UnavailableError("the dispatcher is shutting down"));
  }
  return backup_->Start(target);
}

bool DurableState::disk_busy() const {
  return compaction_->disk_busy() || *results_->pool_file_writes() > 0 || backup_->disk_busy();
}

kj::Promise<void> DurableState::StopBackgroundWork() {
  background_stopped_ = true;
  compaction_->Stop();
  results_->Stop();
  backup_->Stop();
  if (!BackgroundWorkInFlight()) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  stop_waiter_ = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

void DurableState::WakeStopWaiter() {
  if (BackgroundWorkInFlight()) return;
  KJ_IF_MAYBE (waiter, stop_waiter_) {
    (*waiter)->fulfill();
  }
  stop_waiter_ = nullptr;
}

bool DurableState::BackgroundWorkInFlight() const {
  return compaction_->in_flight() || (sync_ != nullptr && sync_->in_flight()) ||
         results_->in_flight() || backup_->in_flight();
}

}  // namespace dispatch::reactor
