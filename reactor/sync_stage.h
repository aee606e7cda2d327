// SyncStage: the durability stage of a Store that defers its fsync
// (--synchronous=full, single node). A write is durable once a WAL fsync
// that began after it has returned: at most one fsync runs at a time, it
// covers every write made before it began (group commit), and what is
// written meanwhile waits for the next one. The fsync of a small group
// commit runs on the loop right after its write while the disk has been
// quick lately (SlowFsyncWindow) and none of our own heavy writes runs
// (disk_busy: a WAL fsync would queue behind them); every other fsync runs
// on the thread pool. Such a loop is nearly idle: it has no work to overlap
// with the fsync, and handing it to the pool and back costs two thread
// wake-ups, more than a quick fsync itself. The store's high-water mark
// moves before the stage reports the writes durable. A failed fsync is
// never retried (the kernel may have dropped the dirty pages, so a later
// success would prove nothing): the stage reports it once and stops.
// REQUIRES: loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "reactor/durability_stage.h"
#include "reactor/histogram.h"
#include "reactor/slow_fsync_window.h"
#include "reactor/uvkj/pool_work.h"
#include "storage/store.h"

namespace dispatch::reactor {

struct SyncStageOptions {
  // A group commit of at most this many records may be fsynced on the loop
  // (0: always the thread pool).
  uint64_t inline_sync_max_records = 0;
  // An fsync longer than this is slow (SlowFsyncWindow).
  uint64_t inline_sync_max_micros = 1000;
  // Small commits' fsyncs remembered; 0: slowness is not looked at (tests).
  size_t inline_sync_window = 128;
};

struct SyncStats {
  uint64_t syncs = 0;                 // WAL fsyncs done, on the pool or the loop
  uint64_t inline_syncs = 0;          // those of them run on the loop thread
  uint64_t commits_per_sync_max = 0;  // most group commits one of them made durable
};

class SyncStage final : public DurabilityStage {
 public:
  // `syncer` syncs the store's WAL through a descriptor of its own.
  // `disk_busy`: true while heavy writes of ours run on the pool.
  // `on_idle`: called when an fsync ended, before the next one starts (the
  // owner's stop waiter).
  SyncStage(uv_loop_t* loop, storage::Store& store, std::unique_ptr<storage::WalSyncer> syncer,
            SyncStageOptions options, std::function<bool()> disk_busy,
            std::function<void()> on_idle);
  ~SyncStage() override;
  SyncStage(const SyncStage&) = delete;
  SyncStage& operator=(const SyncStage&) = delete;

  void Written(uint64_t write, const JournalBatch* batch, uint64_t first_seq) override;
  uint64_t durable() const override { return synced_; }
  void Fail(const Status& status) override;
  bool in_flight() const override { return sync_.in_flight(); }

  // True when every write told has been fsynced.
  bool all_durable() const { return synced_ == written_; }
  const SyncStats& stats() const { return stats_; }
  // One deferred fsync, start to done (on the pool: the hand-off there and
  // back included).
  const Histogram& sync_seconds() const { return sync_seconds_; }
  // Test hook: the next WAL fsync fails (fail-stop follows).
  void fail_next_sync_for_testing() { fail_next_sync_ = true; }

 private:
  struct SyncJob;
  // Starts the fsync of what is written and not yet covered, unless one
  // runs. `records`: those of the commit just written (0: not called right
  // after a commit), which decide whether the loop may run it itself.
  void StartSync(size_t records);
  void OnSyncDone(std::unique_ptr<SyncJob> job);

  storage::Store& store_;
  const SyncStageOptions options_;
  const std::function<bool()> disk_busy_;
  const std::function<void()> on_idle_;
  // Owned here while idle, by the job while it runs.
  std::unique_ptr<storage::WalSyncer> syncer_;
  uvkj::PoolWork<SyncJob> sync_;
  SlowFsyncWindow small_fsyncs_;
  uint64_t written_ = 0;       // the last write told
  uint64_t syncing_upto_ = 0;  // the last write the fsync in flight covers
  uint64_t synced_ = 0;        // the last write made durable
  uint64_t sync_seq_ = 0;      // the store's last record when the fsync in flight began
  uint64_t sync_start_ns_ = 0;
  uint64_t commits_unsynced_ = 0;  // group commits since the last fsync began
  uint64_t records_unsynced_ = 0;  // their records
  bool failed_ = false;
  bool fail_next_sync_ = false;
  SyncStats stats_;
  Histogram sync_seconds_{Histogram::SecondsBounds()};
};

}  // namespace dispatch::reactor
