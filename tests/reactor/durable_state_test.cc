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
#include "storage/store.h"
#include "tests/state/update_builders.h"
#include "tests/state/update_generator.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"

namespace dispatch::reactor {
namespace {

using state::testing::OwnedUpdate;
using state::testing::UpdateGenerator;

// A store and its recovered state on a fresh or existing work dir.
struct Opened {
  std::unique_ptr<storage::Store> store;
  std::unique_ptr<DurableState> durable;
};

Opened Open(uv_loop_t* loop, const std::string& dir, DurableStateOptions options = {},
            uint64_t max_db_bytes = 0, int checkpoint_wal_frames = 0) {
  storage::StoreOptions store_options;
  store_options.work_dir = dir;
  store_options.synchronous = storage::Synchronous::kNormal;  // these tests are about logic
  store_options.max_db_bytes = max_db_bytes;
  if (checkpoint_wal_frames > 0) store_options.checkpoint_wal_frames = checkpoint_wal_frames;
  Opened opened;
  auto store = storage::Store::Open(store_options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  opened.store = std::move(store.value());
  auto durable = DurableState::Recover(loop, *opened.store, options);
  EXPECT_TRUE(durable.ok()) << durable.status().ToString();
  if (durable.ok()) opened.durable = std::move(durable.value());
  return opened;
}

// Applies `count` generated updates, committing in passes of random size and
// (when `snapshot_odds` > 0) snapshotting at random points.
void RunLive(DurableState& durable, UpdateGenerator& generator, std::mt19937_64& rng, int count,
             int snapshot_odds) {
  int in_pass = 0;
  int pass_size = 1 + rng() % 64;
  for (int i = 0; i < count; ++i) {
    OwnedUpdate update = generator.Next(durable.state());
    ASSERT_TRUE(durable.Submit(update.reader()).ok()) << "update " << i;
    if (++in_pass == pass_size) {
      durable.CommitPass();
      in_pass = 0;
      pass_size = 1 + rng() % 64;
      if (snapshot_odds > 0 && rng() % snapshot_odds == 0) {
        ASSERT_TRUE(durable.Snapshot().ok());
      }
    }
  }
  durable.CommitPass();
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
    EXPECT_GT(live.durable->stats().max_batch, 1u) << "passes should group several updates";
  }
  Opened replayed = Open(loop_.get(), dir_.path(), {.snapshot_every = 0});
  EXPECT_EQ(replayed.durable->stats().replayed, 12000u);
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
    EXPECT_GT(live.durable->stats().snapshots, 0u);
    EXPECT_GT(live.store->snapshot_seq(), 0u);
  }
  Opened replayed = Open(loop_.get(), dir_.path());
  EXPECT_LT(replayed.durable->stats().replayed, 12000u) << "start-up should begin at the snapshot";
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
    for (int i = 0; i < 32; ++i) ASSERT_TRUE(durable.Submit(generator.Next(durable.state()).reader()).ok());
    durable.CommitPass();
    // Background snapshots are recorded by the loop once their child is
    // done; here each is let finish before the next pass.
    while (durable.snapshot_in_flight()) uv_run(loop_.get(), UV_RUN_ONCE);
    // The journal since the last snapshot never exceeds N plus one pass.
    ASSERT_LT(live.store->journal_length(), 1000u + 32u);
  }
  EXPECT_GE(durable.stats().snapshots, 4u);
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
  for (int pass = 0; pass < 2000 && durable.stats().checkpoints < 3; ++pass) {
    for (int i = 0; i < 32; ++i) ASSERT_TRUE(durable.Submit(generator.Next(durable.state()).reader()).ok());
    durable.CommitPass();
    uv_run(loop_.get(), UV_RUN_NOWAIT);
  }
  while (durable.checkpoint_in_flight()) uv_run(loop_.get(), UV_RUN_ONCE);
  EXPECT_GE(durable.stats().checkpoints, 3u);
  // The completions came back and copied the WAL: little is left to copy.
  EXPECT_LT(opened.store->wal_frames() - opened.store->backfilled_frames(), 16 * 64);
}

TEST_F(DurableStateTest, BarrierReleasesAReplyOnlyAfterItsPassCommitted) {
  uvkj::UvAsyncIo io(loop_.get());
  Opened opened = Open(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;
  io.port().SetPassEndHook([&]() { durable.CommitPass(); });

  // Nothing pending: a read is answered at once.
  EXPECT_TRUE(durable.Barrier().poll(io.wait_scope()));

  uint64_t seq_seen_by_reply = 0;
  int replies = 0;
  // One "loop pass": five requests each submit an update and park a reply.
  auto pass = kj::evalLater([&]() {
    kj::Vector<kj::Promise<void>> parked;
    for (uint64_t i = 1; i <= 5; ++i) {
      auto update = state::testing::RegisterDataset(i, 1000 + i);
      KJ_ASSERT(durable.Submit(update.reader()).ok());
      parked.add(durable.Barrier().then([&]() {
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
  EXPECT_EQ(durable.stats().commits, 1u) << "one pass, one transaction";
  EXPECT_EQ(durable.stats().max_batch, 5u);
  io.port().SetPassEndHook(nullptr);
}

TEST_F(DurableStateTest, RejectedUpdateIsNeitherAppliedNorJournaled) {
  Opened opened = Open(loop_.get(), dir_.path());
  DurableState& durable = *opened.durable;
  ASSERT_TRUE(durable.Submit(state::testing::RegisterDataset(1, 77).reader()).ok());
  uint64_t digest = durable.state().Digest();
  // Same fingerprint again: the state refuses it.
  Status status = durable.Submit(state::testing::RegisterDataset(2, 77).reader());
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(durable.state().Digest(), digest);
  durable.CommitPass();
  EXPECT_EQ(opened.store->last_seq(), 1u);
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
    durable.SetFatalHandler([&](const Status& s) {
      ++fatal_calls;
      fatal = s;
    });
    ASSERT_TRUE(durable.Submit(state::testing::RegisterDataset(1, 1, "def-1").reader()).ok());
    durable.CommitPass();
    ASSERT_FALSE(durable.failed());
    committed_digest = durable.state().Digest();

    ASSERT_TRUE(durable.Submit(state::testing::RegisterDataset(2, 2, "def-2").reader()).ok());
    durable.PutDataset("def-2", std::string(1 << 20, 'x'));
    auto parked = durable.Barrier();
    durable.CommitPass();
    EXPECT_TRUE(durable.failed());
    EXPECT_EQ(fatal_calls, 1);
    EXPECT_FALSE(fatal.ok());
    EXPECT_ANY_THROW(parked.wait(io.wait_scope()));
    // Nothing is acknowledged any more.
    EXPECT_FALSE(durable.Submit(state::testing::RegisterDataset(3, 3, "def-3").reader()).ok());
    EXPECT_ANY_THROW(durable.Barrier().wait(io.wait_scope()));
  }
  // The restart holds exactly what was committed.
  Opened restarted = Open(loop_.get(), dir_.path());
  EXPECT_EQ(restarted.durable->state().Digest(), committed_digest);
}

TEST_F(DurableStateTest, RecordThatDoesNotApplyStopsRecoveryNamingIt) {
  {
    Opened opened = Open(loop_.get(), dir_.path());
    for (uint64_t i = 1; i <= 10; ++i) {
      ASSERT_TRUE(opened.durable->Submit(state::testing::RegisterDataset(i, 500 + i).reader()).ok());
    }
    opened.durable->CommitPass();
    // Bytes that pass storage's checksum but are no valid Update: a bug or
    // a journal written by something else.
    storage::Batch batch;
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
