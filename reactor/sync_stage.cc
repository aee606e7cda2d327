#include "reactor/sync_stage.h"

#include <algorithm>

namespace dispatch::reactor {

// The fsync's pool job: it owns the WalSyncer (a descriptor of its own)
// while it runs, and its result. It touches nothing else.
struct SyncStage::SyncJob final : public uvkj::PoolJob {
  void Run() override {
    const uint64_t start = uv_hrtime();
    result = syncer->Sync();
    fsync_ns = uv_hrtime() - start;
  }

  std::unique_ptr<storage::WalSyncer> syncer;
  Status result = InternalError("the WAL fsync did not run");
  uint64_t fsync_ns = 0;
  uint64_t records = 0;  // in the commits it covers
};

SyncStage::SyncStage(uv_loop_t* loop, storage::Store& store,
                     std::unique_ptr<storage::WalSyncer> syncer, SyncStageOptions options,
                     std::function<bool()> disk_busy, std::function<void()> on_idle)
    : store_(store),
      options_(options),
      disk_busy_(std::move(disk_busy)),
      on_idle_(std::move(on_idle)),
      syncer_(std::move(syncer)),
      sync_(loop),
      small_fsyncs_(options.inline_sync_max_micros * 1000, options.inline_sync_window) {}

// An fsync in flight is given up (uvkj::PoolWork): its job keeps the syncer
// until it is done and touches nothing of ours.
SyncStage::~SyncStage() = default;

void SyncStage::Written(uint64_t write, const JournalBatch* batch, uint64_t first_seq) {
  (void)first_seq;
  written_ = write;
  size_t records = 0;
  if (batch != nullptr) {
    records = batch->record_count();
    ++commits_unsynced_;
    records_unsynced_ += records;
  }
  StartSync(records);
}

void SyncStage::Fail(const Status& status) {
  (void)status;
  failed_ = true;
}

void SyncStage::StartSync(size_t records) {
  if (failed_ || sync_.in_flight() || written_ == synced_) return;
  if (fail_next_sync_) {
    fail_next_sync_ = false;
    syncer_->fail_next_sync_for_testing();
  }
  stats_.commits_per_sync_max = std::max(stats_.commits_per_sync_max, commits_unsynced_);
  commits_unsynced_ = 0;
  auto job = std::make_unique<SyncJob>();
  job->syncer = std::move(syncer_);
  job->records = records_unsynced_;
  records_unsynced_ = 0;
  sync_start_ns_ = uv_hrtime();
  sync_seq_ = store_.last_seq();
  syncing_upto_ = written_;
  const bool inline_sync = records > 0 && records <= options_.inline_sync_max_records &&
                           small_fsyncs_.quick() && !disk_busy_();
  if (inline_sync) {
    ++stats_.inline_syncs;
    job->Run();
    OnSyncDone(std::move(job));
    return;
  }
  if (sync_.Start(job, [this](std::unique_ptr<SyncJob> done) { OnSyncDone(std::move(done)); }) <
      0) {
    // No thread pool to run it: sync here rather than never.
    job->Run();
    OnSyncDone(std::move(job));
  }
}

void SyncStage::OnSyncDone(std::unique_ptr<SyncJob> job) {
  syncer_ = std::move(job->syncer);
  // Only small commits tell whether the loop's next fsync would be quick:
  // a large one's takes long by its size alone.
  if (job->records <= options_.inline_sync_max_records) small_fsyncs_.Add(job->fsync_ns);
  if (failed_) return;
  if (!job->result.ok()) {
    failed_ = true;
    Status failure = store_.FailSync(job->result);
    if (listener() != nullptr) listener()->OnStageFailed(failure);
    return;
  }
  ++stats_.syncs;
  // The high-water mark moves before any reply this fsync covers leaves.
  store_.NoteDurable(sync_seq_);
  sync_seconds_.Observe(static_cast<double>(uv_hrtime() - sync_start_ns_) * 1e-9);
  synced_ = syncing_upto_;
  if (listener() != nullptr) listener()->OnStageAdvanced();
  if (on_idle_) on_idle_();
  // What was written meanwhile gets the next fsync.
  StartSync(0);
}

}  // namespace dispatch::reactor
