#include "reactor/compaction.h"

#include <atomic>

#include "common/log.h"
#include "state/codec.h"

namespace dispatch::reactor {

Compaction::Compaction(uv_loop_t* loop, storage::Store& store, CommitPipeline& pipeline,
                       std::unique_ptr<SnapshotReplica> snapshotter,
                       std::unique_ptr<storage::Checkpointer> checkpointer,
                       CompactionOptions options, std::function<void()> on_idle)
    : loop_(loop),
      store_(store),
      pipeline_(pipeline),
      options_(std::move(options)),
      on_idle_(std::move(on_idle)),
      snapshotter_(std::move(snapshotter)),
      last_snapshot_start_seq_(store.snapshot_seq()),
      checkpointer_(std::move(checkpointer)),
      checkpoint_(loop) {}

// The members give their pool work up (a checkpoint goes on with its own
// connection until it is done; nothing is lost either way: the WAL and the
// journal hold every commit).
Compaction::~Compaction() = default;

void Compaction::AfterCommit() {
  MaybeSnapshot();
  MaybeCheckpoint();
}

void Compaction::Stop() {
  stopped_ = true;
  CancelSnapshot();
}

void Compaction::NoteSnapshotWritten(uint64_t seq) {
  if (snapshotter_ != nullptr) snapshotter_->Invalidate();
  ++stats_.snapshots;
  last_snapshot_start_seq_ = seq;
}

void Compaction::MaybeSnapshot() {
  // Called right after a commit: the state is exactly the one after
  // store_.last_seq(), nothing uncommitted in it.
  if (options_.snapshot_every == 0 || pipeline_.failed() || pipeline_.pending()) return;
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
        Fail(status);
        return;
      }
      ++stats_.snapshot_failures;
      last_snapshot_start_seq_ = store_.last_seq();
      Log(LogLevel::kWarning, "snapshot skipped: ", status.ToString().c_str());
    } else {
      Log(LogLevel::kInfo, "snapshot at record ", outcome.info.seq,
          " recorded: ", outcome.info.size,
          " bytes, written on the loop thread (--snapshot-in-background=false), total ",
          outcome.total_micros / 1000, " ms");
    }
    if (options_.snapshot_observer) options_.snapshot_observer(outcome);
    return;
  }
  if (stopped_ || snapshotter_ == nullptr || snapshotter_->in_flight()) return;
  if (pipeline_.clock().MonotonicNanos() < snapshot_not_before_ns_) return;
  const uint64_t seq = store_.last_seq();
  Status started =
      snapshotter_->Start(seq, pipeline_.state().NumApplied(), [this](SnapshotOutcome outcome) {
        OnSnapshotDone(std::move(outcome));
        on_idle_();
      });
  if (!started.ok()) {
    ++stats_.snapshot_failures;
    snapshot_not_before_ns_ =
        pipeline_.clock().MonotonicNanos() + options_.snapshot_retry_ms * 1000000;
    Log(LogLevel::kWarning, "cannot start a snapshot (retrying in ", options_.snapshot_retry_ms,
        " ms): ", started.ToString().c_str());
    return;
  }
  last_snapshot_start_seq_ = seq;
  if (replicator_ != nullptr) replicator_->SnapshotStarted(seq);
}

void Compaction::OnSnapshotDone(SnapshotOutcome outcome) {
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
  const bool ok =
      outcome.status.ok() && recorded.has_value() && recorded->name == outcome.info.name;
  replicator_->SnapshotEnded(outcome.info.seq, ok ? &*recorded : nullptr);
}

void Compaction::OnSnapshotDoneLocally(SnapshotOutcome& outcome) {
  if (outcome.status.ok() && outcome.info.seq < store_.snapshot_seq()) {
    // A newer snapshot was recorded meanwhile (an inline one): this file is
    // of no use.
    RemoveSnapshotFiles({outcome.info.name});
    if (options_.snapshot_observer) options_.snapshot_observer(outcome);
    return;
  } else if (outcome.status.ok()) {
    auto obsolete = pipeline_.failed() ? Result<std::vector<std::string>>(pipeline_.failure())
                                       : store_.RecordSnapshot(outcome.info);
    if (obsolete.ok()) {
      ++stats_.snapshots;
      stats_.last_snapshot_micros = outcome.total_micros;
      snapshot_seconds_.Observe(static_cast<double>(outcome.total_micros) * 1e-6);
      stats_.last_snapshot_bytes = outcome.info.size;
      // The record naming the new file may not be durable yet: the older
      // files go once every stage has passed it.
      DurableWaiters removal;
      removal.WhenDurable([this, names = std::move(*obsolete)]() { RemoveSnapshotFiles(names); });
      pipeline_.NoteOtherWrite(kj::mv(removal));
      Log(LogLevel::kInfo, "snapshot at record ", outcome.info.seq,
          " recorded: ", outcome.info.size, " bytes in ", outcome.info.name.c_str(), "; caught up ",
          outcome.records_applied, " records in ", outcome.catch_up_micros / 1000,
          " ms, encoded and wrote in ", outcome.write_micros / 1000, " ms, total ",
          outcome.total_micros / 1000, " ms");
    } else {
      outcome.status = obsolete.status();
      if (store_.failed()) {
        Fail(obsolete.status());
        return;
      }
    }
  }
  if (!outcome.status.ok()) {
    // Nothing is lost: the journal still holds every record. Try again
    // later, once the journal has grown enough since the recorded snapshot.
    // A file the task wrote before it failed is nobody's.
    const auto& recorded = store_.latest_snapshot();
    if (!outcome.info.name.empty() &&
        (!recorded.has_value() || recorded->name != outcome.info.name)) {
      RemoveSnapshotFiles({outcome.info.name});
    }
    ++stats_.snapshot_failures;
    last_snapshot_start_seq_ = store_.snapshot_seq();
    snapshot_not_before_ns_ =
        pipeline_.clock().MonotonicNanos() + options_.snapshot_retry_ms * 1000000;
    Log(LogLevel::kWarning, "snapshot at record ", outcome.info.seq, " failed (retrying in ",
        options_.snapshot_retry_ms, " ms): ", outcome.status.ToString().c_str());
  }
  if (options_.snapshot_observer) options_.snapshot_observer(outcome);
}

void Compaction::RemoveSnapshotFiles(const std::vector<std::string>& names) {
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

bool Compaction::disk_busy() const {
  return snapshot_in_flight() || checkpoint_.in_flight() || *unlinks_in_flight_ > 0;
}

void Compaction::set_snapshot_fault_for_testing(SnapshotFault fault) {
  if (snapshotter_ != nullptr) snapshotter_->set_fault_for_testing(fault);
}

Status Compaction::Snapshot() {
  if (pipeline_.failed()) return pipeline_.failure();
  if (pipeline_.pending())
    return FailedPreconditionError("a snapshot needs every update committed first");
  if (store_.journal_length() == 0) return Status::Ok();
  const uint64_t start = uv_hrtime();
  std::string bytes = state::EncodeSnapshot(pipeline_.state());
  DISPATCH_RETURN_IF_ERROR(store_.WriteSnapshot(store_.last_seq(), bytes));
  ++stats_.snapshots;
  stats_.last_snapshot_micros = (uv_hrtime() - start) / 1000;
  snapshot_seconds_.Observe(static_cast<double>(stats_.last_snapshot_micros) * 1e-6);
  stats_.last_snapshot_bytes = bytes.size();
  last_snapshot_start_seq_ = store_.last_seq();
  return Status::Ok();
}

struct Compaction::CheckpointJob final : public uvkj::PoolJob {
  void Run() override {
    result = checkpointer->Checkpoint();
    // The loop writes nothing meanwhile: if the WAL is all copied, restart it
    // here, so that the new WAL header's fsync is not the loop's.
    if (remainder && result.ok()) result = checkpointer->RestartWal(*result);
    // Told to the loop before it hears the job is back: it holds its writes
    // from now on (commits_held()).
    if (!remainder && result.ok() && result->complete())
      copied_all.store(true, std::memory_order_release);
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

bool Compaction::commits_held() const {
  if (writes_held_) return true;
  // A checkpoint that copied the whole WAL is on its way back: a write now
  // would restart the WAL here, its header fsync on the loop. Its end
  // starts the pass that restarts it on the pool instead.
  return checkpoint_.in_flight() && checkpoint_.job().copied_all.load(std::memory_order_acquire);
}

void Compaction::MaybeCheckpoint() {
  if (stopped_ || checkpoints_paused_ || checkpointer_ == nullptr || checkpoint_.in_flight() ||
      !store_.WantsCheckpoint()) {
    return;
  }
  StartCheckpoint(/*remainder=*/false);
}

bool Compaction::StartCheckpoint(bool remainder) {
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

void Compaction::OnCheckpointDone(std::unique_ptr<CheckpointJob> job) {
  checkpointer_ = std::move(job->checkpointer);
  const bool was_remainder = job->remainder;
  writes_held_ = false;
  if (job->result.ok()) {
    if (!job->restart_only) {
      ++stats_.checkpoints;
      checkpoint_seconds_.Observe(static_cast<double>(uv_hrtime() - checkpoint_start_ns_) * 1e-9);
    }
    if (job->result->restarted_wal) ++stats_.wal_restarts_off_loop;
    // Frames committed while the checkpoint ran keep SQLite from restarting
    // the WAL. When the WAL is long the rest is copied by a second pass, on
    // the thread pool like the first, with commits held until it is back.
    // That pass also restarts the WAL, and so does one after a pass that
    // copied everything (nothing to copy then): left to the loop's next
    // commit, the restart's header fsync would hold every reply.
    const bool copy_rest = store_.NoteCheckpoint(*job->result) || store_.WalFullyCopied();
    if (copy_rest && !was_remainder && !stopped_ && !checkpoints_paused_ && !pipeline_.failed() &&
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
    Fail(store_.FailSync(job->result.status()));
    RecordHeldSnapshot();  // failed now: its file goes, nothing is recorded
    on_idle_();
    return;
  }
  // What waited for the checkpoint is written now.
  RecordHeldSnapshot();
  on_idle_();
  pipeline_.CommitPass();
}

void Compaction::RecordHeldSnapshot() {
  if (!held_snapshot_outcome_.has_value()) return;
  SnapshotOutcome outcome = std::move(*held_snapshot_outcome_);
  held_snapshot_outcome_.reset();
  OnSnapshotDone(std::move(outcome));
}

}  // namespace dispatch::reactor
