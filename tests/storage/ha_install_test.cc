// What HA mode's snapshots in etcd need of the Store (docs/high_availability.md
// §5): a TablesReader pinned right after a commit reads the dataset and result
// tables exactly as they stood then, whatever the loop commits meanwhile, and
// refuses a damaged row naming it; InstallSnapshot makes an empty store hold a
// snapshot and those tables so its journal goes on after the snapshot's
// record, survives a reopen, and refuses a store that is not empty.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "storage/store.h"
#include "storage/tables_reader.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using testing::OptionsFor;
using testing::PayloadBatch;
using testing::RawSql;
using testing::ReplayAll;
using testing::TempDir;

std::unique_ptr<Store> MustOpen(const std::string& dir) {
  auto store = Store::Open(OptionsFor(dir, Synchronous::kNormal));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

TEST(TablesReader, SeesTheTablesAsTheyStoodAtItsPinWhileLaterCommitsChangeThem) {
  TempDir tmp;
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  JournalBatch first = PayloadBatch(1, 3);
  first.PutDataset("ds-a", "range count=1");
  first.PutResult(7, "seven");
  first.PutResult(8, "eight");
  ASSERT_TRUE(store->Commit(first).ok());
  auto reader = store->NewTablesReader();
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto pinned = (*reader)->Pin();
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(*pinned, 3u);
  // Later commits: a deletion, a replacement, new rows.
  JournalBatch later = PayloadBatch(4, 1);
  later.DeleteResult(7);
  later.PutResult(9, "nine");
  later.PutDataset("ds-b", "range count=2");
  ASSERT_TRUE(store->Commit(later).ok());
  JournalBatch tables;
  Status read;
  std::thread other([&] { read = (*reader)->ReadAll(&tables); });  // off the "loop", as in the reactor
  other.join();
  ASSERT_TRUE(read.ok()) << read.ToString();
  ASSERT_EQ(tables.dataset_puts().size(), 1u);
  EXPECT_EQ(tables.dataset_puts()[0].key, "ds-a");
  ASSERT_EQ(tables.result_puts().size(), 2u);
  EXPECT_EQ(tables.result_puts()[0].closure_id, 7u);
  EXPECT_EQ(tables.result_puts()[0].bytes, "seven");
  EXPECT_EQ(tables.result_puts()[1].closure_id, 8u);
  EXPECT_FALSE((*reader)->pinned());
  // Pinned again, it sees the later commit.
  ASSERT_TRUE((*reader)->Pin().ok());
  JournalBatch now;
  ASSERT_TRUE((*reader)->ReadAll(&now).ok());
  EXPECT_EQ(now.dataset_puts().size(), 2u);
  EXPECT_EQ(now.result_puts().size(), 2u);
  reader->reset();
}

TEST(TablesReader, RefusesADamagedResultNamingItsClosure) {
  TempDir tmp;
  {
    auto store = MustOpen(tmp.path());
    ASSERT_NE(store, nullptr);
    JournalBatch batch = PayloadBatch(1, 1);
    batch.PutResult(42, "forty-two");
    ASSERT_TRUE(store->Commit(batch).ok());
  }
  RawSql(tmp.path() + "/dispatch.db", "UPDATE result SET body = X'00' WHERE closure = 42");
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  auto reader = store->NewTablesReader();
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE((*reader)->Pin().ok());
  JournalBatch tables;
  Status read = (*reader)->ReadAll(&tables);
  EXPECT_EQ(read.code(), StatusCode::kDataLoss) << read.ToString();
  EXPECT_NE(read.message().find("closure 42"), std::string::npos) << read.ToString();
  EXPECT_FALSE((*reader)->pinned());
}

TEST(InstallSnapshot, AnEmptyStoreGoesOnAfterTheSnapshotWithItsTablesAndKeepsThemAcrossAReopen) {
  TempDir tmp;
  {
    auto store = MustOpen(tmp.path());
    ASSERT_NE(store, nullptr);
    JournalBatch tables;
    tables.PutDataset("ds-a", "range count=1");
    tables.PutResult(5, "five");
    ASSERT_TRUE(store->InstallSnapshot(100, "state at 100", tables).ok());
    EXPECT_EQ(store->last_seq(), 100u);
    EXPECT_EQ(store->snapshot_seq(), 100u);
    auto next = store->Commit(PayloadBatch(101, 2));
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    EXPECT_EQ(*next, 102u);
    // Not empty any more: a second install is refused and changes nothing.
    Status again = store->InstallSnapshot(200, "other", JournalBatch());
    EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.ToString();
    EXPECT_EQ(store->last_seq(), 102u);
  }
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  auto loaded = store->LoadLatestSnapshot();
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status().ToString();
  EXPECT_EQ((*loaded)->seq, 100u);
  EXPECT_EQ((*loaded)->bytes, "state at 100");
  auto records = ReplayAll(*store, 100);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  EXPECT_EQ(records->size(), 2u);
  EXPECT_EQ(*store->GetDataset("ds-a"), "range count=1");
  EXPECT_EQ(*store->GetResult(5), "five");
}

TEST(InstallSnapshot, RefusesTablesWithRecordsAndChangesNothing) {
  TempDir tmp;
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  Status refused = store->InstallSnapshot(10, "s", PayloadBatch(1, 1));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_EQ(store->last_seq(), 0u);
  EXPECT_FALSE(store->has_snapshot());
}

}  // namespace
}  // namespace dispatch::storage
