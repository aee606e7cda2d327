// DurableState over a Store that defers its fsync (the dispatcher's, with
// --synchronous=full): the loop writes each group commit, the WAL fsync runs
// on the thread pool, one at a time, and a reply leaves only once the fsync
// covering its commit is back. What the loop writes while one runs shares the
// next one. A failed fsync is fail-stop: nothing it covered is acknowledged,
// reads that observed it included. The checkpoint's remainder pass runs on
// the thread pool too, with commits held, so the WAL still restarts.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "reactor/durable_state.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "storage/store.h"
#include "tests/reactor/opened_durable.h"
#include "tests/state/update_builders.h"
#include "tests/support/loop_passes.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_until.h"

namespace dispatch::reactor {
namespace {

namespace b = state::testing;

Opened OpenDeferred(uv_loop_t* loop, const std::string& dir, int wal_restart_frames,
                    DurableStateOptions durable_options) {
  storage::StoreOptions options;
  options.work_dir = dir;
  options.synchronous = storage::Synchronous::kFull;
  options.defer_sync = true;
  if (wal_restart_frames > 0) {
    options.checkpoint_wal_frames = 16;
    options.wal_restart_frames = wal_restart_frames;
  }
  Opened opened = OpenDurable(loop, options, std::move(durable_options));
  EXPECT_TRUE(opened.store != nullptr && opened.store->defers_sync());
  return opened;
}

Opened OpenDeferred(uv_loop_t* loop, const std::string& dir, int wal_restart_frames = 0,
                    uint64_t inline_sync_max_records = 0) {
  return OpenDeferred(loop, dir, wal_restart_frames,
                      {.snapshot_every = 0, .sync = {.inline_sync_max_records = inline_sync_max_records}});
}

class DeferredSyncTest : public ::testing::Test {
 protected:
  uvkj::UvLoop loop_;
  testing::TempDir dir_;
};

TEST_F(DeferredSyncTest, CommitsWrittenDuringAnFsyncShareTheNextOne) {
  uvkj::UvAsyncIo io(loop_.get());
  Opened opened = OpenDeferred(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;

  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(1, 101).reader()).ok());
  auto first = durable.pipeline().Barrier();
  durable.EndOfPass();
  // Written (the connection sees it) but not durable: its fsync is on the
  // thread pool, and only the loop can learn that it is back.
  EXPECT_EQ(opened.store->last_seq(), 1u);
  EXPECT_TRUE(durable.sync_stage()->in_flight());
  EXPECT_FALSE(durable.all_durable());

  // Two more passes while that fsync runs: both are written at once, and
  // neither starts an fsync of its own.
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(2, 102).reader()).ok());
  auto second = durable.pipeline().Barrier();
  durable.EndOfPass();
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(3, 103).reader()).ok());
  auto third = durable.pipeline().Barrier();
  durable.EndOfPass();
  EXPECT_EQ(opened.store->last_seq(), 3u);
  EXPECT_EQ(durable.pipeline().stats().commits, 3u);
  EXPECT_EQ(durable.sync_stage()->stats().syncs, 0u);

  first.wait(io.wait_scope());
  second.wait(io.wait_scope());
  third.wait(io.wait_scope());
  EXPECT_TRUE(durable.all_durable());
  EXPECT_EQ(durable.sync_stage()->stats().syncs, 2u) << "one fsync for the first commit, one for the next two";
  EXPECT_EQ(durable.sync_stage()->stats().commits_per_sync_max, 2u);
  // Nothing pending: a read is answered at once.
  EXPECT_TRUE(durable.pipeline().Barrier().poll(io.wait_scope()));
}

// A small commit on a quick disk is fsynced on the loop, right after its
// write: durable when the pass ends, with no fsync left in flight. A commit
// of more records (a busy loop) still goes to the thread pool.
TEST_F(DeferredSyncTest, ASmallCommitIsFsyncedOnTheLoopAndALargerOneOnThePool) {
  uvkj::UvAsyncIo io(loop_.get());
  Opened opened = OpenDeferred(loop_.get(), dir_.path(), 0, /*inline_sync_max_records=*/2);
  DurableState& durable = *opened.durable;

  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(1, 101).reader()).ok());
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(2, 102).reader()).ok());
  auto small = durable.pipeline().Barrier();
  durable.EndOfPass();
  EXPECT_FALSE(durable.sync_stage()->in_flight());
  EXPECT_TRUE(durable.all_durable());
  EXPECT_EQ(durable.sync_stage()->stats().syncs, 1u);
  EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, 1u);
  EXPECT_TRUE(small.poll(io.wait_scope()));

  for (uint64_t id = 3; id <= 5; ++id) {
    ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(id, 100 + id).reader()).ok());
  }
  auto large = durable.pipeline().Barrier();
  durable.EndOfPass();
  EXPECT_TRUE(durable.sync_stage()->in_flight());
  EXPECT_FALSE(durable.all_durable());
  large.wait(io.wait_scope());
  EXPECT_TRUE(durable.all_durable());
  EXPECT_EQ(durable.sync_stage()->stats().syncs, 2u);
  EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, 1u);
}

// Small commits are fsynced on the loop while at most one of the recent
// small commits' fsyncs was slower than inline_sync_max_micros (here: any
// is): a disk that stalls now and then tends to again, and an fsync on the
// loop holds every reply while it lasts. A large commit's fsync is not
// counted: it is slow by its size alone. With no window, slowness is not
// looked at.
TEST_F(DeferredSyncTest, SmallCommitsGoToThePoolOnceTwoOfTheirRecentFsyncsWereSlow) {
  for (const size_t window : {size_t{128}, size_t{0}}) {
    SCOPED_TRACE("inline_sync_window " + std::to_string(window));
    uvkj::UvLoop loop;
    uvkj::UvAsyncIo io(loop.get());
    testing::TempDir dir;
    Opened opened = OpenDeferred(loop.get(), dir.path(), 0,
                                 {.snapshot_every = 0,
                                  .sync = {.inline_sync_max_records = 2,
                                           .inline_sync_max_micros = 0,
                                           .inline_sync_window = window}});
    DurableState& durable = *opened.durable;
    uint64_t id = 0;
    auto commit = [&](int records) {
      for (int i = 0; i < records; ++i) {
        ++id;
        ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(id, 100 + id).reader()).ok());
      }
      auto durable_now = durable.pipeline().Barrier();
      durable.EndOfPass();
      durable_now.wait(io.wait_scope());
      ASSERT_TRUE(durable.all_durable());
    };

    commit(3);  // on the pool, slow, not counted
    EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, 0u);
    commit(1);
    EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, 1u) << "a large commit's slow fsync was counted";
    commit(1);
    EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, 2u) << "one slow fsync is not yet a slow disk";
    commit(1);
    if (window > 0) {
      EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, 2u) << "fsynced on the loop after two slow ones";
    } else {
      EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, 3u) << "no window asked for";
    }
    EXPECT_EQ(durable.sync_stage()->stats().syncs, 4u);
  }
}

// While a snapshot is written on the thread pool, even a small commit's
// fsync goes to the pool: on ext4 it would wait behind the snapshot file's
// data, holding the loop (every reply) for tens of milliseconds. Once the
// snapshot is back, small commits are fsynced on the loop again. The loop
// learns that a pool job ended only by running, so while this test drives
// commits by hand the snapshot stays in flight.
TEST_F(DeferredSyncTest, NoFsyncRunsOnTheLoopWhileASnapshotIsWrittenOnThePool) {
  uvkj::UvAsyncIo io(loop_.get());
  // Inline whatever the disk's speed: only the snapshot decides here.
  Opened opened = OpenDeferred(loop_.get(), dir_.path(), 0,
                               {.snapshot_every = 4,
                                .sync = {.inline_sync_max_records = 8,
                                         .inline_sync_max_micros = 3600ull * 1000 * 1000}});
  DurableState& durable = *opened.durable;

  for (uint64_t id = 1; id <= 4; ++id) {
    ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(id, 100 + id).reader()).ok());
  }
  auto due = durable.pipeline().Barrier();
  durable.EndOfPass();
  ASSERT_TRUE(durable.compaction().snapshot_in_flight());
  EXPECT_TRUE(durable.disk_busy());
  const uint64_t inline_before = durable.sync_stage()->stats().inline_syncs;

  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(5, 105).reader()).ok());
  auto during = durable.pipeline().Barrier();
  durable.EndOfPass();
  EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, inline_before) << "fsynced on the loop during a snapshot";
  EXPECT_FALSE(durable.all_durable());

  due.wait(io.wait_scope());
  during.wait(io.wait_scope());
  ASSERT_TRUE(testing::WaitUntil([&]() { return !durable.disk_busy() && durable.all_durable(); },
                                 testing::LoopPasses(io), std::chrono::seconds(60)));
  EXPECT_EQ(durable.compaction().stats().snapshots, 1u);

  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(6, 106).reader()).ok());
  auto after = durable.pipeline().Barrier();
  durable.EndOfPass();
  EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, inline_before + 1);
  EXPECT_TRUE(after.poll(io.wait_scope()));
}

// A file write another component runs on the pool (a closure result's)
// keeps small commits' fsyncs off the loop until it ends, like a snapshot.
TEST_F(DeferredSyncTest, NoFsyncRunsOnTheLoopWhileAnAnnouncedFileWriteRuns) {
  uvkj::UvAsyncIo io(loop_.get());
  Opened opened = OpenDeferred(loop_.get(), dir_.path(), 0,
                               {.snapshot_every = 0,
                                .sync = {.inline_sync_max_records = 8,
                                         .inline_sync_max_micros = 3600ull * 1000 * 1000}});
  DurableState& durable = *opened.durable;
  std::shared_ptr<uint64_t> file_writes = durable.results().pool_file_writes();
  ++*file_writes;
  EXPECT_TRUE(durable.disk_busy());
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(1, 101).reader()).ok());
  auto during = durable.pipeline().Barrier();
  durable.EndOfPass();
  EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, 0u);
  during.wait(io.wait_scope());

  --*file_writes;
  EXPECT_FALSE(durable.disk_busy());
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(2, 102).reader()).ok());
  durable.EndOfPass();
  EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, 1u);
  EXPECT_TRUE(durable.all_durable());
}

// Fsynced on the loop or on the pool, a failed fsync is the same fail-stop:
// nothing it covered is acknowledged.
TEST_F(DeferredSyncTest, AFailedInlineFsyncIsFailStopAndNothingItCoveredIsAcknowledged) {
  uvkj::UvAsyncIo io(loop_.get());
  Opened opened = OpenDeferred(loop_.get(), dir_.path(), 0, /*inline_sync_max_records=*/8);
  DurableState& durable = *opened.durable;
  int fatal_calls = 0;
  durable.pipeline().SetFatalHandler([&](const Status&) { ++fatal_calls; });
  durable.sync_stage()->fail_next_sync_for_testing();
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(1, 101).reader()).ok());
  auto write = durable.pipeline().Barrier();
  durable.EndOfPass();
  EXPECT_EQ(durable.sync_stage()->stats().inline_syncs, 1u);
  EXPECT_ANY_THROW(write.wait(io.wait_scope()));
  EXPECT_EQ(fatal_calls, 1);
  EXPECT_TRUE(opened.store->failed());
  EXPECT_EQ(durable.sync_stage()->stats().syncs, 0u) << "a failed fsync is not counted as one";
  EXPECT_FALSE(durable.pipeline().Submit(b::RegisterDataset(2, 102).reader()).ok());
}

TEST_F(DeferredSyncTest, AFailedFsyncIsFailStopAndNothingItCoveredIsAcknowledged) {
  uvkj::UvAsyncIo io(loop_.get());
  Opened opened = OpenDeferred(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;
  int fatal_calls = 0;
  Status fatal;
  durable.pipeline().SetFatalHandler([&](const Status& s) {
    ++fatal_calls;
    fatal = s;
  });
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(1, 101).reader()).ok());
  durable.EndOfPass();
  durable.pipeline().Barrier().wait(io.wait_scope());
  ASSERT_TRUE(durable.all_durable());

  durable.sync_stage()->fail_next_sync_for_testing();
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(2, 102).reader()).ok());
  auto write = durable.pipeline().Barrier();
  durable.EndOfPass();
  ASSERT_TRUE(durable.sync_stage()->in_flight());
  // A read now (nothing in the batch) may have observed dataset 2: it waits
  // for the same fsync.
  auto read = durable.pipeline().Barrier();
  // A pass written while the failing fsync runs waits for a later one.
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(3, 103).reader()).ok());
  auto later = durable.pipeline().Barrier();
  durable.EndOfPass();

  EXPECT_ANY_THROW(write.wait(io.wait_scope()));
  EXPECT_ANY_THROW(read.wait(io.wait_scope()));
  EXPECT_ANY_THROW(later.wait(io.wait_scope()));
  EXPECT_EQ(fatal_calls, 1);
  EXPECT_EQ(fatal.code(), StatusCode::kUnavailable) << fatal.ToString();
  // The store failed (the dispatcher exits with kExitStorageFailure), and
  // nothing is written or acknowledged any more; the fsync is not retried.
  EXPECT_TRUE(opened.store->failed());
  EXPECT_TRUE(durable.pipeline().failed());
  EXPECT_EQ(durable.sync_stage()->stats().syncs, 1u);
  EXPECT_FALSE(durable.sync_stage()->in_flight());
  EXPECT_FALSE(durable.pipeline().Submit(b::RegisterDataset(4, 104).reader()).ok());
  EXPECT_ANY_THROW(durable.pipeline().Barrier().wait(io.wait_scope()));
  JournalBatch batch;
  batch.AddRecord("x");
  EXPECT_FALSE(opened.store->Commit(batch).ok());
}

// Under steady commits the off-loop checkpoint never catches up by itself;
// its remainder pass (commits held meanwhile) lets the WAL restart, so the
// WAL stays bounded with nothing copied on the loop thread.
TEST_F(DeferredSyncTest, TheWalRestartsUnderSteadyCommits) {
  Opened opened = OpenDeferred(loop_.get(), dir_.path(), /*wal_restart_frames=*/64);
  DurableState& durable = *opened.durable;
  int restarts = 0;
  int max_frames = 0;
  int previous = opened.store->wal_frames();
  uint64_t id = 0;
  // Bounded by time as well as passes: the checkpoint runs on a pool thread,
  // which a loaded machine can starve for many quick passes (4,000 passes
  // once saw a single restart). The pass cap bounds the WAL if it never
  // restarts.
  const auto deadline = std::chrono::steady_clock::now() + testing::kTestDeadline;
  for (int pass = 0; pass < 40000 && restarts < 3 && std::chrono::steady_clock::now() < deadline;
       ++pass) {
    for (int i = 0; i < 8; ++i) {
      ++id;
      ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(id, 1000 + id, "", std::string(512, 'm')).reader()).ok());
    }
    durable.EndOfPass();
    uv_run(loop_.get(), UV_RUN_NOWAIT);
    const int frames = opened.store->wal_frames();
    if (frames < previous) ++restarts;
    max_frames = std::max(max_frames, frames);
    previous = frames;
  }
  EXPECT_GE(restarts, 3) << "the WAL never restarted; it grew to " << max_frames << " frames";
  ASSERT_TRUE(testing::WaitUntil(
      [&]() { return durable.all_durable() && !durable.compaction().checkpoint_in_flight(); },
      testing::LoopPasses(loop_.get())));
  EXPECT_FALSE(durable.pipeline().failed());
}

// A reply waits for the commit of its own batch, not for whichever fsync
// comes back first: a batch still unwritten when an fsync starts (here: the
// one started when the previous fsync came back) is not covered by it. Found
// by the power-loss suite; before the fix the third reply left with its
// record never written.
TEST_F(DeferredSyncTest, AnUnwrittenBatchIsNotReleasedByAnFsyncThatStartedBeforeItsCommit) {
  uvkj::UvAsyncIo io(loop_.get());
  Opened opened = OpenDeferred(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;

  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(1, 101).reader()).ok());
  auto first = durable.pipeline().Barrier();
  durable.EndOfPass();  // written; its fsync runs
  ASSERT_TRUE(durable.sync_stage()->in_flight());
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(2, 102).reader()).ok());
  auto second = durable.pipeline().Barrier();
  durable.EndOfPass();  // written; waits for the next fsync
  // A third batch, submitted but not committed yet (as when a remainder
  // checkpoint holds commits, or before the pass ends).
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterDataset(3, 103).reader()).ok());
  auto third = durable.pipeline().Barrier();

  // The first fsync comes back and the next one, for the second commit,
  // starts and comes back too.
  first.wait(io.wait_scope());
  second.wait(io.wait_scope());
  EXPECT_EQ(opened.store->last_seq(), 2u) << "the third batch is not written";
  EXPECT_FALSE(third.poll(io.wait_scope())) << "released before its record was written";

  durable.EndOfPass();
  third.wait(io.wait_scope());
  EXPECT_EQ(opened.store->last_seq(), 3u);
  EXPECT_TRUE(durable.all_durable());
}

}  // namespace
}  // namespace dispatch::reactor
