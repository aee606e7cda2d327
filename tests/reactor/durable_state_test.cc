// DurableState: the journal-then-apply path of the dispatcher. Replay after a
// restart reproduces the live state exactly (with and without snapshots); a
// reply parked on the barrier is released only once its pass committed; a
// failed commit fails the parked replies and stops acknowledging anything.
#include "reactor/durable_state.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "common/checksum.h"
#include "storage/store.h"
#include "tests/reactor/opened_durable.h"
#include "tests/state/update_builders.h"
#include "tests/state/update_generator.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"
#include "tests/support/wait_until.h"

namespace dispatch::reactor {
namespace {

using state::testing::OwnedUpdate;
using state::testing::UpdateGenerator;

Opened Open(uv_loop_t* loop, const std::string& dir, DurableStateOptions options = {},
            uint64_t max_db_bytes = 0, int checkpoint_wal_frames = 0,
            size_t max_record_bytes = 0, size_t max_dataset_bytes = 0) {
  storage::StoreOptions store_options = LogicStoreOptions(dir);
  if (max_record_bytes > 0) store_options.max_record_bytes = max_record_bytes;
  if (max_dataset_bytes > 0) store_options.max_dataset_bytes = max_dataset_bytes;
  store_options.max_db_bytes = max_db_bytes;
  if (checkpoint_wal_frames > 0) store_options.checkpoint_wal_frames = checkpoint_wal_frames;
  return OpenDurable(loop, store_options, std::move(options));
}

// Applies `count` generated updates, committing in passes of random size and
// (when `snapshot_odds` > 0) snapshotting at random points.
void RunLive(DurableState& durable, UpdateGenerator& generator, std::mt19937_64& rng, int count,
             int snapshot_odds) {
  int in_pass = 0;
  int pass_size = 1 + rng() % 64;
  for (int i = 0; i < count; ++i) {
    OwnedUpdate update = generator.Next(durable.state());
    ASSERT_TRUE(durable.pipeline().Submit(update.reader()).ok()) << "update " << i;
    if (++in_pass == pass_size) {
      // The loop never turns here: CommitPass could wait for a checkpoint
      // to come back (commits_held()).
      durable.pipeline().CommitNow();
      in_pass = 0;
      pass_size = 1 + rng() % 64;
      if (snapshot_odds > 0 && rng() % snapshot_odds == 0) {
        ASSERT_TRUE(durable.compaction().Snapshot().ok());
      }
    }
  }
  durable.pipeline().CommitNow();
}

class DurableStateTest : public ::testing::Test {
 protected:
  uvkj::UvLoop loop_;
  testing::TempDir dir_;
};

TEST_F(DurableStateTest, ReplayAfterRestartReproducesTheLiveDigest) {
  uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  UpdateGenerator generator(seed);
  uint64_t live_digest, live_applied;
  {
    Opened live = Open(loop_.get(), dir_.path(), {.snapshot_every = 0});
    RunLive(*live.durable, generator, rng, 12000, 0);
    live_digest = live.durable->state().Digest();
    live_applied = live.durable->state().NumApplied();
    EXPECT_EQ(live.store->last_seq(), 12000u);
    EXPECT_GT(live.durable->pipeline().stats().max_batch, 1u) << "passes should group several updates";
  }
  Opened replayed = Open(loop_.get(), dir_.path(), {.snapshot_every = 0});
  EXPECT_EQ(replayed.durable->recovery().replayed, 12000u);
  EXPECT_EQ(replayed.durable->state().NumApplied(), live_applied);
  EXPECT_EQ(replayed.durable->state().Digest(), live_digest);
}

TEST_F(DurableStateTest, SnapshotsAtRandomPointsReplayToTheSameDigest) {
  uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  UpdateGenerator generator(seed);
  uint64_t live_digest;
  {
    Opened live = Open(loop_.get(), dir_.path(), {.snapshot_every = 0});
    RunLive(*live.durable, generator, rng, 12000, 20);
    live_digest = live.durable->state().Digest();
    EXPECT_GT(live.durable->compaction().stats().snapshots, 0u);
    EXPECT_GT(live.store->snapshot_seq(), 0u);
  }
  Opened replayed = Open(loop_.get(), dir_.path());
  EXPECT_LT(replayed.durable->recovery().replayed, 12000u) << "start-up should begin at the snapshot";
  EXPECT_EQ(replayed.durable->state().Digest(), live_digest);
  // And the restarted dispatcher keeps going from there like the original.
  UpdateGenerator more(seed + 1);
  RunLive(*replayed.durable, more, rng, 500, 0);
  EXPECT_EQ(replayed.store->last_seq(), 12500u);
}

TEST_F(DurableStateTest, AutomaticSnapshotsKeepTheJournalShort) {
  uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  UpdateGenerator generator(seed);
  Opened live = Open(loop_.get(), dir_.path(), {.snapshot_every = 1000});
  DurableState& durable = *live.durable;
  for (int pass = 0; pass < 5000 / 32; ++pass) {
    for (int i = 0; i < 32; ++i) ASSERT_TRUE(durable.pipeline().Submit(generator.Next(durable.state()).reader()).ok());
    durable.EndOfPass();
    // Background snapshots are recorded by the loop once their child is
    // done; here each is let finish before the next pass.
    while (durable.compaction().snapshot_in_flight()) uv_run(loop_.get(), UV_RUN_ONCE);
    // The journal since the last snapshot never exceeds N plus one pass.
    ASSERT_LT(live.store->journal_length(), 1000u + 32u);
  }
  EXPECT_GE(durable.compaction().stats().snapshots, 4u);
  // What the snapshots cover is deleted by later commits, a slice each.
  EXPECT_LT(live.store->last_seq() - live.store->journal_first_seq() + 1, 2 * (1000u + 32u));
}

TEST_F(DurableStateTest, CheckpointsRunOnTheThreadPoolAndComeBackToTheLoop) {
  uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  UpdateGenerator generator(seed);
  Opened opened = Open(loop_.get(), dir_.path(), {.snapshot_every = 0}, 0, 16);
  DurableState& durable = *opened.durable;
  // Commit pass after pass, letting the loop deliver checkpoint completions
  // in between, until a few checkpoints have come back.
  for (int pass = 0; pass < 2000 && durable.compaction().stats().checkpoints < 3; ++pass) {
    for (int i = 0; i < 32; ++i) ASSERT_TRUE(durable.pipeline().Submit(generator.Next(durable.state()).reader()).ok());
    durable.EndOfPass();
    uv_run(loop_.get(), UV_RUN_NOWAIT);
  }
  while (durable.compaction().checkpoint_in_flight()) uv_run(loop_.get(), UV_RUN_ONCE);
  EXPECT_GE(durable.compaction().stats().checkpoints, 3u);
  // The completions came back and copied the WAL: little is left to copy.
  EXPECT_LT(opened.store->wal_frames() - opened.store->backfilled_frames(), 16 * 64);
}

TEST_F(DurableStateTest, TheCheckpointerRestartsTheWalSoNoCommitOnTheLoopDoes) {
  uint64_t seed = testing::TestSeed();
  UpdateGenerator generator(seed);
  Opened opened = Open(loop_.get(), dir_.path(), {.snapshot_every = 0}, 0, 16);
  DurableState& durable = *opened.durable;
  // Each checkpoint copies the whole WAL (no commit races it here), so the
  // next write restarts the WAL: a restart job on the pool, not the loop's
  // next commit, with its header fsync.
  for (int pass = 0; pass < 2000 && durable.compaction().stats().wal_restarts_off_loop < 3; ++pass) {
    for (int i = 0; i < 32; ++i) ASSERT_TRUE(durable.pipeline().Submit(generator.Next(durable.state()).reader()).ok());
    durable.EndOfPass();
    while (durable.compaction().checkpoint_in_flight()) uv_run(loop_.get(), UV_RUN_ONCE);
  }
  EXPECT_GE(durable.compaction().stats().wal_restarts_off_loop, 3u);
  EXPECT_EQ(opened.store->wal_restarts_on_loop(), 0u);
  EXPECT_GE(durable.compaction().stats().checkpoints, durable.compaction().stats().wal_restarts_off_loop);
}

TEST_F(DurableStateTest, ACommitWaitsForACheckpointThatCopiedEverythingToComeBack) {
  uint64_t seed = testing::TestSeed();
  UpdateGenerator generator(seed);
  Opened opened = Open(loop_.get(), dir_.path(), {.snapshot_every = 0}, 0, 16);
  DurableState& durable = *opened.durable;
  for (int pass = 0; pass < 2000 && !durable.compaction().checkpoint_in_flight(); ++pass) {
    for (int i = 0; i < 32; ++i) ASSERT_TRUE(durable.pipeline().Submit(generator.Next(durable.state()).reader()).ok());
    durable.EndOfPass();
  }
  ASSERT_TRUE(durable.compaction().checkpoint_in_flight());
  // The loop does not turn: the checkpoint runs on the pool, copies the
  // whole WAL (nothing is committed meanwhile) and cannot come back yet.
  // The window the loop's next commit used to fall into, restarting the
  // WAL with its header fsync on the loop.
  ASSERT_TRUE(testing::WaitUntil([&] { return durable.compaction().commits_held(); }));
  const uint64_t last_seq = opened.store->last_seq();
  ASSERT_TRUE(durable.pipeline().Submit(generator.Next(durable.state()).reader()).ok());
  durable.EndOfPass();
  EXPECT_EQ(opened.store->last_seq(), last_seq) << "committed while the checkpoint was on its way back";
  EXPECT_EQ(opened.store->wal_restarts_on_loop(), 0u);
  // Back on the loop: the restart runs on the pool, then the update commits.
  while (durable.compaction().checkpoint_in_flight()) uv_run(loop_.get(), UV_RUN_ONCE);
  EXPECT_EQ(opened.store->last_seq(), last_seq + 1);
  EXPECT_EQ(durable.compaction().stats().wal_restarts_off_loop, 1u);
  EXPECT_EQ(opened.store->wal_restarts_on_loop(), 0u);
  EXPECT_FALSE(durable.compaction().commits_held());
}

TEST_F(DurableStateTest, BarrierReleasesAReplyOnlyAfterItsPassCommitted) {
  uvkj::UvAsyncIo io(loop_.get());
  Opened opened = Open(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;
  io.port().SetPassEndHook([&]() { durable.EndOfPass(); });

  // Nothing pending: a read is answered at once.
  EXPECT_TRUE(durable.pipeline().Barrier().poll(io.wait_scope()));

  uint64_t seq_seen_by_reply = 0;
  int replies = 0;
  // One "loop pass": five requests each submit an update and park a reply.
  auto pass = kj::evalLater([&]() {
    kj::Vector<kj::Promise<void>> parked;
    for (uint64_t i = 1; i <= 5; ++i) {
      auto update = state::testing::RegisterDataset(i, 1000 + i);
      KJ_ASSERT(durable.pipeline().Submit(update.reader()).ok());
      parked.add(durable.pipeline().Barrier().then([&]() {
        seq_seen_by_reply = opened.store->last_seq();
        ++replies;
      }));
    }
    // Still inside the pass: nothing is durable, no reply went out.
    KJ_ASSERT(opened.store->last_seq() == 0);
    KJ_ASSERT(replies == 0);
    return kj::joinPromises(parked.releaseAsArray());
  });
  pass.wait(io.wait_scope());
  EXPECT_EQ(replies, 5);
  EXPECT_EQ(seq_seen_by_reply, 5u) << "a reply left before its update was committed";
  EXPECT_EQ(durable.pipeline().stats().commits, 1u) << "one pass, one transaction";
  EXPECT_EQ(durable.pipeline().stats().max_batch, 5u);
  io.port().SetPassEndHook(nullptr);
}

TEST_F(DurableStateTest, RejectedUpdateIsNeitherAppliedNorJournaled) {
  Opened opened = Open(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;
  ASSERT_TRUE(durable.pipeline().Submit(state::testing::RegisterDataset(1, 77).reader()).ok());
  uint64_t digest = durable.state().Digest();
  // Same fingerprint again: the state refuses it.
  Status status = durable.pipeline().Submit(state::testing::RegisterDataset(2, 77).reader());
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(durable.state().Digest(), digest);
  durable.EndOfPass();
  EXPECT_EQ(opened.store->last_seq(), 1u);
}

TEST_F(DurableStateTest, AppliedObserversHearOnlyUpdatesThatDidSomethingEffectsList) {
  Opened opened = Open(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;
  std::vector<std::vector<uint64_t>> heard;  // each call's scheduled closures
  durable.pipeline().AddAppliedObserver(
      [&heard](const state::Effects& effects) { heard.push_back(effects.scheduled); });
  ASSERT_TRUE(durable.pipeline().Submit(state::testing::RegisterDataset(1, 77).reader()).ok());
  ASSERT_TRUE(durable.pipeline().Submit(state::testing::RegisterWorker(1, "a").reader()).ok());
  EXPECT_TRUE(heard.empty());
  ASSERT_TRUE(
      durable.pipeline().Submit(state::testing::ScheduleClosure(1, 7, "noop").reader()).ok());
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0], std::vector<uint64_t>{1});
  durable.EndOfPass();
}

// Issue 12: an update the journal can never hold used to be applied, then
// refused by the store at commit, which was fail-stop (exit 3).
TEST_F(DurableStateTest, UpdateOverTheRecordLimitIsRefusedBeforeItIsApplied) {
  Opened opened = Open(loop_.get(), dir_.path(), {}, 0, 0, /*max_record_bytes=*/4096);
  DurableState& durable = *opened.durable;
  int fatal_calls = 0;
  durable.pipeline().SetFatalHandler([&](const Status&) { ++fatal_calls; });
  ASSERT_TRUE(durable.pipeline().Submit(state::testing::RegisterDataset(1, 1).reader()).ok());
  const uint64_t digest = durable.state().Digest();
  Status status = durable.pipeline().Submit(
      state::testing::ScheduleClosure(1, 9, "f", std::string(5000, 'a')).reader());
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_NE(status.message().find("4096"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("closureBatch.scheduled"), std::string::npos)
      << status.ToString();
  EXPECT_EQ(durable.state().Digest(), digest);
  EXPECT_EQ(durable.pipeline().stats().refused_for_size, 1u);
  durable.EndOfPass();
  EXPECT_FALSE(durable.pipeline().failed());
  EXPECT_EQ(fatal_calls, 0);
  EXPECT_EQ(opened.store->last_seq(), 1u);
  // The dispatcher goes on: a record that fits is journaled.
  ASSERT_TRUE(durable.pipeline().Submit(
      state::testing::ScheduleClosure(1, 9, "f", std::string(3000, 'a')).reader()).ok());
  durable.EndOfPass();
  EXPECT_EQ(opened.store->last_seq(), 2u);
}

TEST_F(DurableStateTest, APassPastMaxBatchBytesCommitsWhatItHasFirst) {
  uvkj::UvAsyncIo io(loop_.get());
  Opened opened = Open(loop_.get(), dir_.path(), {.max_batch_bytes = 10000});
  DurableState& durable = *opened.durable;
  ASSERT_TRUE(durable.pipeline().Submit(
      state::testing::ScheduleClosure(1, 9, "f", std::string(6000, 'a')).reader()).ok());
  auto parked = durable.pipeline().Barrier();
  EXPECT_EQ(opened.store->last_seq(), 0u);
  // The second would take the batch past 10000 bytes: the first commits now,
  // and the reply parked on it is released.
  ASSERT_TRUE(durable.pipeline().Submit(
      state::testing::ScheduleClosure(2, 9, "f", std::string(6000, 'b')).reader()).ok());
  EXPECT_EQ(opened.store->last_seq(), 1u);
  EXPECT_EQ(durable.pipeline().stats().early_commits, 1u);
  parked.wait(io.wait_scope());
  // One update larger than the whole budget still goes, alone.
  ASSERT_TRUE(durable.pipeline().Submit(
      state::testing::ScheduleClosure(3, 9, "f", std::string(12000, 'c')).reader()).ok());
  EXPECT_EQ(opened.store->last_seq(), 2u);
  durable.EndOfPass();
  EXPECT_EQ(opened.store->last_seq(), 3u);
  EXPECT_EQ(durable.pipeline().stats().early_commits, 2u);
  EXPECT_FALSE(durable.pipeline().failed());
}

// The store's own checks stay as a last line. Reaching one is a bug (a
// handler skipped its check), not a storage failure: the store stays usable
// and the fatal status says Internal, so the process exits with its own code
// (4), not the storage failure's (3).
TEST_F(DurableStateTest, AStoreRefusingABatchAsInputIsABugNotAStorageFailure) {
  uvkj::UvAsyncIo io(loop_.get());
  Opened opened = Open(loop_.get(), dir_.path(), {}, 0, 0, 0, /*max_dataset_bytes=*/1000);
  DurableState& durable = *opened.durable;
  int fatal_calls = 0;
  Status fatal;
  durable.pipeline().SetFatalHandler([&](const Status& s) {
    ++fatal_calls;
    fatal = s;
  });
  ASSERT_TRUE(durable.pipeline().Submit(state::testing::RegisterDataset(1, 1, "def-1").reader()).ok());
  durable.datasets().Put("def-1", std::string(2000, 'x'));  // no handler would let this through
  auto parked = durable.pipeline().Barrier();
  durable.EndOfPass();
  EXPECT_EQ(fatal_calls, 1);
  EXPECT_EQ(fatal.code(), StatusCode::kInternal) << fatal.ToString();
  EXPECT_FALSE(opened.store->failed());
  EXPECT_TRUE(durable.pipeline().failed());  // the state holds what the journal refused
  EXPECT_ANY_THROW(parked.wait(io.wait_scope()));
}

TEST_F(DurableStateTest, FailedCommitFailsParkedRepliesAndStopsAcknowledging) {
  uvkj::UvAsyncIo io(loop_.get());
  uint64_t committed_digest;
  {
    // A database capped small enough that a few big definitions fill it: the
    // commit fails the way it would on a full disk.
    Opened opened = Open(loop_.get(), dir_.path(), {}, 256 * 1024);
    DurableState& durable = *opened.durable;
    int fatal_calls = 0;
    Status fatal;
    durable.pipeline().SetFatalHandler([&](const Status& s) {
      ++fatal_calls;
      fatal = s;
    });
    ASSERT_TRUE(durable.pipeline().Submit(state::testing::RegisterDataset(1, 1, "def-1").reader()).ok());
    durable.EndOfPass();
    ASSERT_FALSE(durable.pipeline().failed());
    committed_digest = durable.state().Digest();

    ASSERT_TRUE(durable.pipeline().Submit(state::testing::RegisterDataset(2, 2, "def-2").reader()).ok());
    durable.datasets().Put("def-2", std::string(1 << 20, 'x'));
    auto parked = durable.pipeline().Barrier();
    durable.EndOfPass();
    EXPECT_TRUE(durable.pipeline().failed());
    EXPECT_EQ(fatal_calls, 1);
    EXPECT_FALSE(fatal.ok());
    EXPECT_ANY_THROW(parked.wait(io.wait_scope()));
    // Nothing is acknowledged any more.
    EXPECT_FALSE(durable.pipeline().Submit(state::testing::RegisterDataset(3, 3, "def-3").reader()).ok());
    EXPECT_ANY_THROW(durable.pipeline().Barrier().wait(io.wait_scope()));
  }
  // The restart holds exactly what was committed.
  Opened restarted = Open(loop_.get(), dir_.path());
  EXPECT_EQ(restarted.durable->state().Digest(), committed_digest);
}

TEST_F(DurableStateTest, RecordThatDoesNotApplyStopsRecoveryNamingIt) {
  {
    Opened opened = Open(loop_.get(), dir_.path());
    for (uint64_t i = 1; i <= 10; ++i) {
      ASSERT_TRUE(opened.durable->pipeline().Submit(state::testing::RegisterDataset(i, 500 + i).reader()).ok());
    }
    opened.durable->EndOfPass();
    // Bytes that pass storage's checksum but are no valid Update: a bug or
    // a journal written by something else.
    JournalBatch batch;
    batch.AddRecord(state::testing::RegisterDataset(1, 999).ToBytes());  // duplicate id
    ASSERT_TRUE(opened.store->Commit(batch).ok());
  }
  storage::StoreOptions options;
  options.work_dir = dir_.path();
  auto store = storage::Store::Open(options);
  ASSERT_TRUE(store.ok());
  auto durable = DurableState::Recover(loop_.get(), **store, {});
  ASSERT_FALSE(durable.ok());
  EXPECT_EQ(durable.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(durable.status().message().find("journal record 11"), std::string::npos)
      << durable.status().message();
}

}  // namespace
}  // namespace dispatch::reactor

namespace dispatch::reactor {
namespace {

namespace b = state::testing;

// Finishes closure `id` (scheduled, assigned to worker 1) with `bytes` kept
// in the result table, as the closure dispatcher does.
void FinishStored(DurableState& durable, uint64_t id, const std::string& bytes,
                  uint32_t crc_offset = 0) {
  ASSERT_TRUE(durable.pipeline().Submit(b::ScheduleClosure(id, 7).reader()).ok());
  ASSERT_TRUE(durable.pipeline().Submit(b::AssignClosure(id, 1, 1).reader()).ok());
  ASSERT_TRUE(durable.pipeline()
                  .Submit(b::FinishClosureStored(id, 1, 1, bytes.size(), Crc32c(bytes) + crc_offset)
                              .reader())
                  .ok());
  durable.results().PutResult(id, bytes);
}

TEST_F(DurableStateTest, StoredResultsCommitWithTheirUpdateAndLeaveWithTheirRelease) {
  const std::string bytes(300000, 'r');
  {
    Opened opened = Open(loop_.get(), dir_.path());
    DurableState& durable = *opened.durable;
    ASSERT_TRUE(durable.pipeline().Submit(b::RegisterWorker(1, "a").reader()).ok());
    FinishStored(durable, 1, bytes);
    // Readable before its commit (a reply of the same pass waits for it).
    EXPECT_EQ(*durable.results().GetResult(*durable.state().FindClosure(1)), bytes);
    durable.EndOfPass();
    EXPECT_TRUE(durable.state().FindClosure(1)->result.empty());  // not in memory
    // A row nobody holds (e.g. left by a reset): dropped at the next start.
    JournalBatch stray;
    stray.PutResult(99, "stray");
    ASSERT_TRUE(opened.store->Commit(stray).ok());
  }
  Opened opened = Open(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;
  EXPECT_EQ(*durable.results().GetResult(*durable.state().FindClosure(1)), bytes);
  EXPECT_EQ(durable.results().stats().unheld_results_dropped, 1u);
  EXPECT_EQ(*opened.store->ListResults(), std::vector<uint64_t>{1});
  ASSERT_TRUE(durable.pipeline().Submit(b::ReleaseClosure(1).reader()).ok());
  durable.results().DeleteResult(1);
  durable.EndOfPass();
  EXPECT_TRUE(opened.store->ListResults()->empty());
}

TEST_F(DurableStateTest, AStoredResultThatDoesNotMatchTheJournalIsDataLossNamingTheClosure) {
  Opened opened = Open(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterWorker(1, "a").reader()).ok());
  FinishStored(durable, 2, "twelve bytes", /*crc_offset=*/1);
  durable.EndOfPass();
  auto read = durable.results().GetResult(*durable.state().FindClosure(2));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("closure 2"), std::string::npos)
      << read.status().ToString();
  EXPECT_EQ(durable.results().stats().results_damaged, 1u);
}

TEST_F(DurableStateTest, ResetWithoutFaultToleranceDropsTheForgottenResults) {
  Opened opened = Open(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;
  ASSERT_TRUE(durable.pipeline().Submit(b::RegisterWorker(1, "a").reader()).ok());
  FinishStored(durable, 3, "kept until the reset");
  durable.EndOfPass();
  ASSERT_EQ(opened.store->ListResults()->size(), 1u);
  ASSERT_TRUE(durable.ResetKeepingIds().ok());
  EXPECT_EQ(durable.state().FindClosure(3), nullptr);
  EXPECT_TRUE(opened.store->ListResults()->empty());
}

}  // namespace
}  // namespace dispatch::reactor
