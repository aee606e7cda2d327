// Checkpoints: the Store asks for one once the WAL passes its threshold, never
// runs one itself, and the Checkpointer's own connection can copy the WAL on
// another thread while the loop thread keeps committing.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <thread>

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
  auto records = ReplayAll(store, 0);
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), next);
}

TEST(Checkpoint, RunsOnAnotherThreadWhileTheLoopThreadCommits) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path(), Synchronous::kNormal);
  options.checkpoint_wal_frames = 20;
  auto opened = Store::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  auto made = store.NewCheckpointer();
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Checkpointer* checkpointer = made->get();

  // The reactor's protocol: at most one checkpoint in flight, started when the
  // Store asks, its completion observed by the loop thread.
  std::atomic<bool> running{false};
  std::atomic<int> completed{0};
  Status checkpoint_error;
  std::thread worker;
  uint64_t next = 1;
  for (int i = 0; i < 1500; ++i) {
    auto last = store.Commit(PayloadBatch(next, 4));
    ASSERT_TRUE(last.ok()) << "commit " << i << ": " << last.status().ToString();
    next += 4;
    if (store.WantsCheckpoint() && !running.load()) {
      if (worker.joinable()) worker.join();
      ASSERT_TRUE(checkpoint_error.ok()) << checkpoint_error.ToString();
      running = true;
      worker = std::thread([&] {
        auto stats = checkpointer->Checkpoint();
        if (!stats.ok()) checkpoint_error = stats.status();
        completed.fetch_add(1);
        running = false;
      });
    }
  }
  if (worker.joinable()) worker.join();
  ASSERT_TRUE(checkpoint_error.ok()) << checkpoint_error.ToString();
  EXPECT_GT(completed.load(), 0);
  EXPECT_FALSE(store.failed());
  auto records = ReplayAll(store, 0);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), next - 1);
  for (const auto& [seq, bytes] : *records) ASSERT_EQ(bytes, RecordPayload(seq)) << seq;
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
