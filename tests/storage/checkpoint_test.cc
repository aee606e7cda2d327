// Checkpoints: the Store asks for one once the WAL passes its threshold, never
// runs one itself, and the Checkpointer's own connection can copy the WAL on
// another thread while the loop thread keeps committing.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include "storage/checkpointer.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using testing::OptionsFor;
using testing::PayloadBatch;
using testing::RecordPayload;
using testing::ReplayAll;
using testing::TempDir;

off_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

TEST(Checkpoint, StoreAsksForACheckpointOncePastTheThresholdAndNeverRunsOne) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path(), Synchronous::kNormal);
  options.checkpoint_wal_frames = 50;
  auto store = Store::Open(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string db_file = (*store)->db_path();
  const off_t db_size_before = FileSize(db_file);
  uint64_t next = 1;
  while (!(*store)->WantsCheckpoint()) {
    ASSERT_TRUE((*store)->Commit(PayloadBatch(next, 10)).ok());
    next += 10;
    ASSERT_LT(next, 100000u) << "the WAL hook never reported the threshold";
  }
  EXPECT_GE((*store)->wal_frames(), 50);
  // Auto-checkpoint is off: nothing was copied into the database file, so the
  // WAL keeps growing until the reactor runs the Checkpointer.
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*store)->Commit(PayloadBatch(next, 10)).ok());
    next += 10;
  }
  EXPECT_EQ(FileSize(db_file), db_size_before);
  EXPECT_GT(FileSize(db_file + "-wal"), 50 * 4096);
}

TEST(Checkpoint, CompleteCheckpointLetsTheNextCommitRestartTheWal) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.checkpoint_wal_frames = 100;
  auto opened = Store::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  auto checkpointer = store.NewCheckpointer();
  ASSERT_TRUE(checkpointer.ok()) << checkpointer.status().ToString();
  uint64_t next = 1;
  while (!store.WantsCheckpoint()) {
    ASSERT_TRUE(store.Commit(PayloadBatch(next, 20)).ok());
    next += 20;
  }
  const int frames_before = store.wal_frames();
  auto stats = (*checkpointer)->Checkpoint();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_TRUE(stats->complete());
  EXPECT_EQ(stats->wal_frames, frames_before);
  ASSERT_TRUE(store.Commit(PayloadBatch(next, 1)).ok());
  EXPECT_LT(store.wal_frames(), frames_before);
  EXPECT_FALSE(store.WantsCheckpoint());
  // That restart (and its WAL header fsync) was the loop connection's.
  EXPECT_EQ(store.wal_restarts_on_loop(), 1u);
  auto records = ReplayAll(store, 0);
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), next);
}

// The loop thread's first commit after a complete checkpoint restarts the WAL
// and syncs its new header right there, behind whatever else the disk does.
// RestartWal makes that first write on the checkpointer's connection instead.
class RestartWal : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions options = OptionsFor(tmp_.path());  // FULL, as the dispatcher runs
    options.checkpoint_wal_frames = 100;
    auto store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    auto checkpointer = store_->NewCheckpointer();
    ASSERT_TRUE(checkpointer.ok()) << checkpointer.status().ToString();
    checkpointer_ = std::move(checkpointer).value();
    while (!store_->WantsCheckpoint()) Commit(20);
    auto stats = checkpointer_->Checkpoint();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    ASSERT_TRUE(stats->complete());
    checkpointed_ = *stats;
    store_->NoteCheckpoint(checkpointed_);
  }

  void Commit(int records) {
    auto committed = store_->Commit(PayloadBatch(next_, records));
    ASSERT_TRUE(committed.ok()) << committed.status().ToString();
    next_ += records;
  }

  void ExpectEveryRecord() {
    auto records = ReplayAll(*store_, 0);
    ASSERT_TRUE(records.ok()) << records.status().ToString();
    ASSERT_EQ(records->size(), next_ - 1);
    for (const auto& [seq, bytes] : *records) ASSERT_EQ(bytes, RecordPayload(seq)) << seq;
  }

  TempDir tmp_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Checkpointer> checkpointer_;
  CheckpointStats checkpointed_;
  uint64_t next_ = 1;
};

TEST_F(RestartWal, RestartsTheWalSoTheLoopsNextCommitAppends) {
  ASSERT_TRUE(store_->WalFullyCopied());
  const int frames_before = store_->wal_frames();
  auto restarted = checkpointer_->RestartWal(checkpointed_);
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  EXPECT_TRUE(restarted->restarted_wal);
  EXPECT_EQ(restarted->wal_frames, 1);
  EXPECT_FALSE(restarted->complete());
  EXPECT_FALSE(store_->NoteCheckpoint(*restarted));
  EXPECT_FALSE(store_->WalFullyCopied());
  EXPECT_EQ(store_->wal_frames(), 1);
  Commit(5);
  EXPECT_EQ(store_->wal_restarts_on_loop(), 0u) << "the loop's commit restarted the WAL after all";
  EXPECT_GT(store_->wal_frames(), 1);
  EXPECT_LT(store_->wal_frames(), frames_before);
  ExpectEveryRecord();
  // What a restart finds: the format version the write rewrote, every record.
  store_.reset();
  checkpointer_.reset();
  auto reopened = Store::Open(OptionsFor(tmp_.path()));
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  store_ = std::move(reopened).value();
  ExpectEveryRecord();
}

TEST(RestartWalTrim, ARestartOnTheCheckpointerTrimsTheWalToItsLimit) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.wal_size_limit_bytes = 256 << 10;
  auto opened = Store::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  auto checkpointer = store.NewCheckpointer();
  ASSERT_TRUE(checkpointer.ok()) << checkpointer.status().ToString();
  const std::string wal = store.db_path() + "-wal";
  uint64_t next = 1;
  // A burst: the WAL file grows well past its limit.
  while (FileSize(wal) < (1 << 20)) {
    ASSERT_TRUE(store.Commit(PayloadBatch(next, 50)).ok());
    next += 50;
  }
  auto stats = (*checkpointer)->Checkpoint();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_TRUE(stats->complete());
  auto restarted = (*checkpointer)->RestartWal(*stats);
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  ASSERT_TRUE(restarted->restarted_wal);
  EXPECT_LE(FileSize(wal), static_cast<off_t>(options.wal_size_limit_bytes));
}

TEST_F(RestartWal, AfterTheLoopsCommitGotThereFirstItOnlyAppendsAFrame) {
  // The loop committed first (and restarted the WAL itself): the WAL holds
  // frames no checkpoint copied, so SQLite cannot restart it again; the
  // write goes after the loop's frames.
  Commit(5);
  ASSERT_EQ(store_->wal_restarts_on_loop(), 1u);
  const int frames = store_->wal_frames();
  auto restarted = checkpointer_->RestartWal(checkpointed_);
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  EXPECT_FALSE(restarted->restarted_wal);
  store_->NoteCheckpoint(*restarted);
  Commit(5);
  EXPECT_GT(store_->wal_frames(), frames + 1) << "the WAL restarted with frames not copied";
  EXPECT_EQ(store_->wal_restarts_on_loop(), 1u);
  ExpectEveryRecord();
}

TEST_F(RestartWal, WritesNothingAfterACheckpointThatFellShort) {
  CheckpointStats short_of_it = checkpointed_;
  short_of_it.checkpointed_frames = checkpointed_.wal_frames - 1;
  auto restarted = checkpointer_->RestartWal(short_of_it);
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  EXPECT_FALSE(restarted->restarted_wal);
  // Nothing was written: the loop's commit is the one that restarts the WAL.
  const int frames = store_->wal_frames();
  Commit(5);
  EXPECT_LT(store_->wal_frames(), frames);
  EXPECT_EQ(store_->wal_restarts_on_loop(), 1u);
}

TEST_F(RestartWal, IsNotNowWhileAnotherConnectionHoldsTheWriteLock) {
  sqlite3* writer = nullptr;
  ASSERT_EQ(sqlite3_open(store_->db_path().c_str(), &writer), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(writer, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  auto restarted = checkpointer_->RestartWal(checkpointed_);
  sqlite3_exec(writer, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(writer);
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  EXPECT_FALSE(restarted->restarted_wal);
}

TEST(Checkpoint, RunsOnAnotherThreadWhileTheLoopThreadCommits) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path(), Synchronous::kNormal);
  options.checkpoint_wal_frames = 20;
  options.wal_restart_frames = 500;
  auto opened = Store::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  auto checkpointer = store.NewCheckpointer();
  ASSERT_TRUE(checkpointer.ok()) << checkpointer.status().ToString();
  testing::ThreadedCheckpoints checkpoints(store, **checkpointer);
  uint64_t next = 1;
  int most_frames = 0;
  int restarts = 0;
  auto commit = [&](int count) {
    const int before = store.wal_frames();
    auto last = store.Commit(PayloadBatch(next, count));
    ASSERT_TRUE(last.ok()) << "commit at " << next << ": " << last.status().ToString();
    next += count;
    if (store.wal_frames() < before) ++restarts;
    most_frames = std::max(most_frames, store.wal_frames());
  };
  for (int i = 0; i < 1500; ++i) {
    commit(4);
    Status status = checkpoints.Poll();
    ASSERT_TRUE(status.ok()) << status.ToString();
  }
  Status status = checkpoints.Drain();
  ASSERT_TRUE(status.ok()) << status.ToString();
  commit(1);
  EXPECT_GT(checkpoints.started(), 0);
  EXPECT_FALSE(store.failed());
  // Hot-loop commits race every off-loop checkpoint; the WAL still restarts
  // because FinishCheckpoint copies the remainder once it is long.
  EXPECT_GT(restarts, 0) << "the WAL never restarted (peak " << most_frames << " frames)";
  std::printf(
      "[ info     ] %d checkpoints off the thread, %d inline remainders, %d WAL restarts, "
      "WAL peaked at %d frames\n",
      checkpoints.started(), checkpoints.inline_passes(), restarts, most_frames);
  auto records = ReplayAll(store, 0);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), next - 1);
  for (const auto& [seq, bytes] : *records) ASSERT_EQ(bytes, RecordPayload(seq)) << seq;
}

// Commits that land while an off-loop checkpoint runs keep it from copying
// the whole WAL. A reader holding an old snapshot has the same effect on a
// checkpoint (it may not copy frames the reader cannot see), which makes the
// race reproducible on one thread.
class CheckpointRemainder : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions options = OptionsFor(tmp_.path(), Synchronous::kNormal);
    options.checkpoint_wal_frames = 50;
    options.inline_checkpoint_max_frames = inline_max_;
    options.wal_restart_frames = wal_restart_;
    auto store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    auto checkpointer = store_->NewCheckpointer();
    ASSERT_TRUE(checkpointer.ok());
    checkpointer_ = std::move(checkpointer).value();
    while (!store_->WantsCheckpoint()) Commit(10);
    // The reader's snapshot ends here; then "the loop" commits more.
    ASSERT_EQ(sqlite3_open(store_->db_path().c_str(), &reader_), SQLITE_OK);
    ASSERT_EQ(
        sqlite3_exec(reader_, "BEGIN; SELECT count(*) FROM journal;", nullptr, nullptr, nullptr),
        SQLITE_OK);
    seen_by_checkpoint_ = store_->wal_frames();
    Commit(10);
    Commit(10);
    auto stats = checkpointer_->Checkpoint();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    stats_ = *stats;
    ASSERT_EQ(sqlite3_exec(reader_, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(reader_);
    reader_ = nullptr;
  }
  void TearDown() override { sqlite3_close(reader_); }

  void Commit(int records) {
    ASSERT_TRUE(store_->Commit(PayloadBatch(next_, records)).ok());
    next_ += records;
  }

  TempDir tmp_;
  int inline_max_ = 256;
  int wal_restart_ = 1;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Checkpointer> checkpointer_;
  sqlite3* reader_ = nullptr;
  uint64_t next_ = 1;
  int seen_by_checkpoint_ = 0;
  CheckpointStats stats_;
};

TEST_F(CheckpointRemainder, WithoutFinishCheckpointTheWalKeepsGrowing) {
  EXPECT_FALSE(stats_.complete());
  EXPECT_EQ(stats_.checkpointed_frames, seen_by_checkpoint_);
  const int frames = store_->wal_frames();
  Commit(10);
  EXPECT_GT(store_->wal_frames(), frames) << "the WAL restarted without a complete checkpoint";
}

TEST_F(CheckpointRemainder, FinishCheckpointCopiesASmallRemainderSoTheWalRestarts) {
  ASSERT_FALSE(stats_.complete());
  const int frames = store_->wal_frames();
  auto finished = store_->FinishCheckpoint(stats_);
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  EXPECT_EQ(finished->passes, 1);
  EXPECT_TRUE(finished->complete());
  EXPECT_FALSE(store_->WantsCheckpoint());
  Commit(10);
  EXPECT_LT(store_->wal_frames(), frames) << "the WAL did not restart";
  EXPECT_EQ(store_->backfilled_frames(), 0);
  auto records = ReplayAll(*store_, 0);
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), next_ - 1);
}

// About 60 frames are in the WAL when FinishCheckpoint runs in these tests
// (threshold 50, then two more commits of ~3 frames).
class CheckpointLargeRemainder : public CheckpointRemainder {
 protected:
  CheckpointLargeRemainder() {
    inline_max_ = 1;
    wal_restart_ = 45;  // long enough to restart, not yet twice that
  }
};

TEST_F(CheckpointLargeRemainder, IsLeftForTheNextOffLoopCheckpoint) {
  ASSERT_LT(store_->wal_frames(), 90);
  auto finished = store_->FinishCheckpoint(stats_);
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  EXPECT_EQ(finished->passes, 0);
  EXPECT_FALSE(finished->complete());
  EXPECT_EQ(store_->backfilled_frames(), seen_by_checkpoint_);
  // The remainder is below the threshold: no checkpoint wanted yet, until
  // enough new frames accumulate.
  EXPECT_FALSE(store_->WantsCheckpoint());
  while (!store_->WantsCheckpoint()) Commit(10);
  auto stats = checkpointer_->Checkpoint();
  ASSERT_TRUE(stats.ok());
  EXPECT_TRUE(stats->complete());
}

class CheckpointShortWal : public CheckpointRemainder {
 protected:
  CheckpointShortWal() { wal_restart_ = 100000; }
};

TEST_F(CheckpointShortWal, RemainderOfAShortWalWaitsForALull) {
  auto finished = store_->FinishCheckpoint(stats_);
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  EXPECT_EQ(finished->passes, 0);
  const int frames = store_->wal_frames();
  Commit(10);
  EXPECT_GT(store_->wal_frames(), frames);
}

class CheckpointTooLongWal : public CheckpointRemainder {
 protected:
  CheckpointTooLongWal() {
    inline_max_ = 1;
    wal_restart_ = 20;  // the WAL is past twice that
  }
};

TEST_F(CheckpointTooLongWal, RemainderIsCopiedWhateverItsSize) {
  ASSERT_GE(store_->wal_frames(), 40);
  auto finished = store_->FinishCheckpoint(stats_);
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  EXPECT_EQ(finished->passes, 1);
  EXPECT_TRUE(finished->complete());
  const int frames = store_->wal_frames();
  Commit(10);
  EXPECT_LT(store_->wal_frames(), frames) << "the WAL did not restart";
}

TEST(Checkpoint, AWalLeftByThePreviousRunIsReportedRightAfterOpen) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path(), Synchronous::kNormal);
  options.checkpoint_wal_frames = 50;
  // A second connection that outlives the Store keeps SQLite from
  // checkpointing and deleting the WAL at close, as a crash would.
  sqlite3* other = nullptr;
  {
    auto store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_EQ(sqlite3_open((*store)->db_path().c_str(), &other), SQLITE_OK);
    // A read opens its WAL; an idle connection in WAL mode keeps its lock.
    ASSERT_EQ(sqlite3_exec(other, "SELECT count(*) FROM journal", nullptr, nullptr, nullptr),
              SQLITE_OK);
    uint64_t next = 1;
    while (!(*store)->WantsCheckpoint()) {
      ASSERT_TRUE((*store)->Commit(PayloadBatch(next, 10)).ok());
      next += 10;
    }
  }
  auto store = Store::Open(options);
  sqlite3_close(other);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->WantsCheckpoint()) << "wal_frames " << (*store)->wal_frames();
  auto checkpointer = (*store)->NewCheckpointer();
  ASSERT_TRUE(checkpointer.ok());
  auto stats = (*checkpointer)->Checkpoint();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_TRUE(stats->complete());
  EXPECT_GE(stats->wal_frames, 50);
}

TEST(Checkpoint, CheckpointWithNothingToCopyIsComplete) {
  TempDir tmp;
  auto store = Store::Open(OptionsFor(tmp.path()));
  ASSERT_TRUE(store.ok());
  auto checkpointer = (*store)->NewCheckpointer();
  ASSERT_TRUE(checkpointer.ok());
  auto first = (*checkpointer)->Checkpoint();
  ASSERT_TRUE(first.ok());
  auto second = (*checkpointer)->Checkpoint();
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->complete());
}

}  // namespace
}  // namespace dispatch::storage
