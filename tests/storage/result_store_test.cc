// The closure result table: results are written in the same transaction as
// the batch's records and deleted a slice per commit after the one that
// releases them; snapshots
// leave them alone; a damaged row is DataLoss naming the closure and its bytes
// are never returned; a database made before the table existed gets it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "clients/pattern_bytes.h"
#include "storage/format.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using testing::OptionsFor;
using testing::RawSql;
using testing::RecordPayload;
using testing::TempDir;

std::unique_ptr<Store> MustOpen(const StoreOptions& options) {
  auto store = Store::Open(options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Bytes fixed by the closure id.
std::string ResultBytes(uint64_t id, size_t size) { return clients::PatternBytes(size, id); }

TEST(ResultStore, ResultsCommitWithTheirRecordsAndSurviveReopenAndSnapshot) {
  TempDir tmp;
  {
    auto store = MustOpen(OptionsFor(tmp.path()));
    JournalBatch batch;
    batch.AddRecord(RecordPayload(1));
    batch.PutResult(7, ResultBytes(7, 300000));  // many overflow pages
    batch.PutResult(8, "");
    ASSERT_TRUE(store->Commit(batch).ok());
    // A snapshot truncates the journal, never the results.
    ASSERT_TRUE(store->WriteSnapshot(1, "state").ok());
  }
  auto store = MustOpen(OptionsFor(tmp.path()));
  auto seven = store->GetResult(7);
  ASSERT_TRUE(seven.ok()) << seven.status().ToString();
  EXPECT_EQ(*seven, ResultBytes(7, 300000));
  auto eight = store->GetResult(8);
  ASSERT_TRUE(eight.ok()) << eight.status().ToString();
  EXPECT_EQ(*eight, "");
  auto ids = store->ListResults();
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<uint64_t>{7, 8}));
}

TEST(ResultStore, ADeleteInALaterBatchRemovesTheRowAndAMissingOneIsNotFound) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path()));
  JournalBatch put;
  put.AddRecord(RecordPayload(1));
  put.PutResult(3, "three");
  ASSERT_TRUE(store->Commit(put).ok());
  JournalBatch release;
  release.AddRecord(RecordPayload(2));
  release.DeleteResult(3);
  ASSERT_TRUE(store->Commit(release).ok());
  auto gone = store->GetResult(3);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("closure 3"), std::string::npos) << gone.status().ToString();
  EXPECT_TRUE(store->ListResults()->empty());
}

TEST(ResultStore, ReleasedRowsLeaveASlicePerCommitAndTheRestWithDeleteReleasedRows) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.result_delete_bytes_per_commit = 1 << 20;
  auto store = MustOpen(options);
  JournalBatch put;
  put.AddRecord(RecordPayload(1));
  for (uint64_t id : {1, 2, 3, 4}) put.PutResult(id, ResultBytes(id, 700 << 10));
  ASSERT_TRUE(store->Commit(put).ok());
  JournalBatch release;
  release.AddRecord(RecordPayload(2));
  for (uint64_t id : {1, 2, 3}) release.DeleteResult(id);
  ASSERT_TRUE(store->Commit(release).ok());
  // 700 KiB, then 1,400 KiB: past the 1 MiB budget after the second row.
  EXPECT_EQ(*store->ListResults(), (std::vector<uint64_t>{3, 4}));
  EXPECT_TRUE(store->HasRowsToDelete());
  ASSERT_TRUE(store->DeleteReleasedRows().ok());
  EXPECT_EQ(*store->ListResults(), (std::vector<uint64_t>{4}));
  EXPECT_FALSE(store->HasRowsToDelete());
  ASSERT_TRUE(store->DeleteReleasedRows().ok());  // nothing left: nothing happens
  EXPECT_EQ(*store->ListResults(), (std::vector<uint64_t>{4}));
  auto kept = store->GetResult(4);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(*kept, ResultBytes(4, 700 << 10));
}

TEST(ResultStore, ARowStoredAgainBeforeItsDeleteCameIsKept) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.result_delete_bytes_per_commit = 1;  // one row per commit
  auto store = MustOpen(options);
  JournalBatch put;
  put.AddRecord(RecordPayload(1));
  put.PutResult(1, ResultBytes(1, 100));
  put.PutResult(2, ResultBytes(2, 100));
  ASSERT_TRUE(store->Commit(put).ok());
  JournalBatch release;
  release.AddRecord(RecordPayload(2));
  release.DeleteResult(1);
  release.DeleteResult(2);
  ASSERT_TRUE(store->Commit(release).ok());
  EXPECT_EQ(*store->ListResults(), (std::vector<uint64_t>{2}));
  // An HA install stores row 2 again while its delete waits: it stays.
  JournalBatch again;
  again.AddRecord(RecordPayload(3));
  again.PutResult(2, ResultBytes(2, 100));
  ASSERT_TRUE(store->Commit(again).ok());
  EXPECT_FALSE(store->HasRowsToDelete());
  EXPECT_EQ(*store->ListResults(), (std::vector<uint64_t>{2}));
}

TEST(ResultStore, AnOversizedResultIsRefusedAndNothingOfItsBatchIsWritten) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.max_result_bytes = 1000;
  auto store = MustOpen(options);
  JournalBatch batch;
  batch.AddRecord(RecordPayload(1));
  batch.PutResult(5, std::string(1001, 'x'));
  auto committed = store->Commit(batch);
  ASSERT_FALSE(committed.ok());
  EXPECT_EQ(committed.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(committed.status().message().find("closure 5"), std::string::npos);
  EXPECT_NE(committed.status().message().find("1000"), std::string::npos);
  EXPECT_FALSE(store->failed());
  EXPECT_EQ(store->last_seq(), 0u);
  EXPECT_TRUE(store->ListResults()->empty());
}

TEST(ResultStore, ADamagedResultIsDataLossNamingTheClosureAndNeverReturned) {
  TempDir tmp;
  std::string db_path;
  {
    auto store = MustOpen(OptionsFor(tmp.path()));
    db_path = store->db_path();
    JournalBatch batch;
    batch.AddRecord(RecordPayload(1));
    batch.PutResult(11, ResultBytes(11, 100000));
    batch.PutResult(12, ResultBytes(12, 100));
    ASSERT_TRUE(store->Commit(batch).ok());
  }
  // Flip bytes of one result in place (same length): its checksum fails.
  ASSERT_EQ(RawSql(db_path,
                   "UPDATE result SET body = zeroblob(length(body)) WHERE closure = 11"),
            "");
  // A row copied under another id fails too: the checksum covers the id.
  ASSERT_EQ(RawSql(db_path,
                   "INSERT INTO result (closure, crc, body) SELECT 13, crc, body FROM result "
                   "WHERE closure = 12"),
            "");
  auto store = MustOpen(OptionsFor(tmp.path()));
  auto damaged = store->GetResult(11);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(damaged.status().message().find("closure 11"), std::string::npos)
      << damaged.status().ToString();
  auto moved = store->GetResult(13);
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().code(), StatusCode::kDataLoss);
  auto intact = store->GetResult(12);
  ASSERT_TRUE(intact.ok());
  EXPECT_EQ(*intact, ResultBytes(12, 100));
}

TEST(ResultStore, ADatabaseFromBeforeTheResultTableGetsIt) {
  TempDir tmp;
  std::string db_path;
  {
    auto store = MustOpen(OptionsFor(tmp.path()));
    db_path = store->db_path();
    JournalBatch batch;
    batch.AddRecord(RecordPayload(1));
    ASSERT_TRUE(store->Commit(batch).ok());
  }
  ASSERT_EQ(RawSql(db_path, "DROP TABLE result"), "");
  auto store = MustOpen(OptionsFor(tmp.path()));
  EXPECT_EQ(store->last_seq(), 1u);
  JournalBatch batch;
  batch.AddRecord(RecordPayload(2));
  batch.PutResult(1, "one");
  ASSERT_TRUE(store->Commit(batch).ok());
  EXPECT_EQ(*store->GetResult(1), "one");
}

}  // namespace
}  // namespace dispatch::storage
