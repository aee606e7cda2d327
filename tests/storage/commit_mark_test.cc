// The journal's high-water mark (COMMITTED, storage/commit_mark.h) and what
// Store::Open makes of it: a journal that ends below a trusted mark is
// DataLoss naming the missing records; a mark that only a machine restart
// under synchronous=normal explains is accepted with a warning; a torn slot
// falls back to the other one; a fresh schema resets it.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "storage/commit_mark.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using testing::OptionsFor;
using testing::PayloadBatch;
using testing::RawSql;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

void Write(const std::string& dir, uint64_t records, Synchronous sync) {
  auto store = Store::Open(OptionsFor(dir, sync));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->Commit(PayloadBatch((*store)->last_seq() + 1, static_cast<int>(records))).ok());
}

TEST(CommitMark, FollowsEveryCommitAndSaysWhetherItWasSynced) {
  for (Synchronous sync : {Synchronous::kFull, Synchronous::kNormal}) {
    TempDir tmp;
    Write(tmp.path(), 7, sync);
    auto mark = CommitMark::Read(tmp.path());
    ASSERT_TRUE(mark.ok() && mark->has_value()) << mark.status().ToString();
    EXPECT_EQ((*mark)->seq, 7u);
    EXPECT_EQ((*mark)->synced, sync == Synchronous::kFull);
    EXPECT_EQ((*mark)->boot_id, CurrentBootId());
  }
}

TEST(CommitMark, WithDeferredSyncItMovesOnlyWhenTheSyncIsNoted) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.defer_sync = true;
  auto store = Store::Open(options);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Commit(PayloadBatch(1, 5)).ok());
  EXPECT_EQ((*store)->commit_mark().seq, 0u);  // written, not synced: not claimed
  auto syncer = (*store)->NewWalSyncer();
  ASSERT_TRUE(syncer.ok() && (*syncer)->Sync().ok());
  (*store)->NoteDurable(5);
  EXPECT_EQ((*store)->commit_mark().seq, 5u);
  EXPECT_TRUE((*store)->commit_mark().synced);
}

TEST(CommitMark, DeletedLastRecordIsDataLossNamingIt) {
  TempDir tmp;
  Write(tmp.path(), 30, Synchronous::kFull);
  ASSERT_EQ(RawSql(tmp.Sub("dispatch.db"), "DELETE FROM journal WHERE seq >= 29"), "");
  auto store = Store::Open(OptionsFor(tmp.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(store.status().message().find("records 29..30 are missing"), std::string::npos)
      << store.status().message();
  EXPECT_NE(store.status().message().find(tmp.Sub("COMMITTED")), std::string::npos);
  // Refusing changed nothing: the same refusal again.
  EXPECT_FALSE(Store::Open(OptionsFor(tmp.path())).ok());
}

TEST(CommitMark, TornNewestSlotFallsBackToTheOlderOne) {
  TempDir tmp;
  Write(tmp.path(), 3, Synchronous::kFull);
  Write(tmp.path(), 2, Synchronous::kFull);  // slots now hold 3 and 5
  std::string bytes = ReadFile(tmp.Sub("COMMITTED"));
  ASSERT_EQ(bytes.size(), 544u);
  auto mark = CommitMark::Read(tmp.path());
  ASSERT_TRUE(mark.ok() && mark->has_value());
  ASSERT_EQ((*mark)->seq, 5u);
  // Whichever slot holds 5 is torn: the other, 3, remains.
  for (size_t offset : {size_t{0}, size_t{512}}) {
    std::string torn = bytes;
    torn[offset + 9] ^= 0x40;
    WriteFile(tmp.Sub("COMMITTED"), torn);
    auto read = CommitMark::Read(tmp.path());
    ASSERT_TRUE(read.ok() && read->has_value());
    if ((*read)->seq != 5u) {
      EXPECT_EQ((*read)->seq, 3u);
    }
  }
  std::string both = bytes;
  both[9] ^= 0x40;
  both[512 + 9] ^= 0x40;
  WriteFile(tmp.Sub("COMMITTED"), both);
  auto store = Store::Open(OptionsFor(tmp.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(store.status().message().find("COMMITTED is damaged"), std::string::npos)
      << store.status().message();
}

// What a power loss under synchronous=normal may leave: the mark on disk,
// the WAL tail not. Accepted (with a warning naming the records) only when
// the machine restarted since; a synced mark is trusted across restarts.
TEST(CommitMark, UnsyncedMarkFromAnotherBootIsAcceptedWithAWarning) {
  for (bool synced : {false, true}) {
    SCOPED_TRACE(synced ? "synced mark" : "unsynced mark");
    TempDir tmp;
    Write(tmp.path(), 10, Synchronous::kNormal);
    CommitMarkValue claim{14, synced, CurrentBootId() ^ 0x5555};
    ASSERT_TRUE(CommitMark::Open(tmp.path(), claim, /*reset=*/true).ok());
    auto store = Store::Open(OptionsFor(tmp.path(), Synchronous::kNormal));
    if (synced) {
      ASSERT_FALSE(store.ok());
      EXPECT_NE(store.status().message().find("records 11..14 are missing"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_EQ((*store)->open_warnings().size(), 1u);
    EXPECT_NE((*store)->open_warnings()[0].find("records 11..14 are lost"), std::string::npos)
        << (*store)->open_warnings()[0];
    EXPECT_EQ((*store)->commit_mark().seq, 10u);  // lowered: the next start is clean
  }
  // The same unsynced mark on this boot: nothing but damage explains it.
  TempDir tmp;
  Write(tmp.path(), 10, Synchronous::kNormal);
  ASSERT_TRUE(CommitMark::Open(tmp.path(), {14, false, CurrentBootId()}, true).ok());
  EXPECT_FALSE(Store::Open(OptionsFor(tmp.path(), Synchronous::kNormal)).ok());
}

TEST(CommitMark, MissingMarkIsAcceptedWithAWarningAndWrittenAgain) {
  TempDir tmp;
  Write(tmp.path(), 4, Synchronous::kFull);
  std::filesystem::remove(tmp.Sub("COMMITTED"));
  auto store = Store::Open(OptionsFor(tmp.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_EQ((*store)->open_warnings().size(), 1u);
  EXPECT_TRUE(std::filesystem::exists(tmp.Sub("COMMITTED")));
  EXPECT_EQ((*store)->commit_mark().seq, 4u);
}

TEST(CommitMark, StartingAfreshOnPurposeResetsIt) {
  TempDir tmp;
  Write(tmp.path(), 9, Synchronous::kFull);
  for (const char* name : {"dispatch.db", "dispatch.db-wal", "dispatch.db-shm", "INITIALIZED"}) {
    std::filesystem::remove(tmp.Sub(name));
  }
  auto store = Store::Open(OptionsFor(tmp.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->last_seq(), 0u);
  EXPECT_EQ((*store)->commit_mark().seq, 0u);
}

}  // namespace
}  // namespace dispatch::storage
