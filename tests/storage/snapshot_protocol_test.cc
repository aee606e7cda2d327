// The snapshot protocol step by step (store.h): write the file, record it,
// truncate the journal in slices, remove older files. A crash between any two
// steps must start up to exactly the state before or after the snapshot, with
// every record there and no leftover file; a version 1 database (snapshot in
// a table) is migrated.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

#include "storage/format.h"
#include "storage/snapshot_file.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using testing::OptionsFor;
using testing::PayloadBatch;
using testing::RawSql;
using testing::ReplayAll;
using testing::SnapshotFilesIn;
using testing::TempDir;

std::unique_ptr<Store> MustOpen(const std::string& dir) {
  auto store = Store::Open(OptionsFor(dir));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Start-up as the reactor does it: the snapshot, then every record after it.
void ExpectStartUp(const std::string& dir, uint64_t snapshot_seq, const std::string& snapshot,
                   uint64_t last_seq) {
  auto store = MustOpen(dir);
  ASSERT_NE(store, nullptr);
  auto loaded = store->LoadLatestSnapshot();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->seq, snapshot_seq);
  EXPECT_EQ((*loaded)->bytes, snapshot);
  auto records = ReplayAll(*store, snapshot_seq);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  EXPECT_EQ(records->size(), last_seq - snapshot_seq);
  EXPECT_EQ(store->last_seq(), last_seq);
  // Whatever was left over is gone; the recorded file stays.
  EXPECT_EQ(SnapshotFilesIn(dir), std::vector<std::string>{(*loaded)->file});
}

TEST(SnapshotProtocol, FileWrittenButNeverRecordedIsRemovedAtStartUp) {
  TempDir tmp;
  {
    auto store = MustOpen(tmp.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Commit(PayloadBatch(1, 10)).ok());
    ASSERT_TRUE(store->WriteSnapshot(10, "s10").ok());
    ASSERT_TRUE(store->Commit(PayloadBatch(11, 10)).ok());
    // The child wrote a newer snapshot, then the dispatcher died before
    // recording it; a second child died halfway through its temp file.
    ASSERT_TRUE(WriteSnapshotFile(tmp.path(), 20, "s20").ok());
    testing::WriteFile(tmp.path() + "/" + SnapshotTempFileName(20), "half a snap");
    EXPECT_EQ(SnapshotFilesIn(tmp.path()).size(), 3u);
  }
  ExpectStartUp(tmp.path(), 10, "s10", 20);
}

TEST(SnapshotProtocol, OlderFileLeftAfterRecordingIsRemovedAtStartUp) {
  TempDir tmp;
  std::string older;
  {
    auto store = MustOpen(tmp.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Commit(PayloadBatch(1, 10)).ok());
    ASSERT_TRUE(store->WriteSnapshot(10, "s10").ok());
    older = SnapshotFilesIn(tmp.path()).at(0);
    ASSERT_TRUE(store->Commit(PayloadBatch(11, 10)).ok());
    auto info = WriteSnapshotFile(tmp.path(), 20, "s20");
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    auto obsolete = store->RecordSnapshot(*info);
    ASSERT_TRUE(obsolete.ok()) << obsolete.status().ToString();
    EXPECT_EQ(*obsolete, std::vector<std::string>{older});
    // ... and the dispatcher dies before it removes `older`, and before any
    // commit deleted a record the new snapshot covers.
  }
  ExpectStartUp(tmp.path(), 20, "s20", 20);
}

TEST(SnapshotProtocol, SameSnapshotRecordedTwiceKeepsItsFile) {
  TempDir tmp;
  {
    auto store = MustOpen(tmp.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Commit(PayloadBatch(1, 10)).ok());
    ASSERT_TRUE(store->WriteSnapshot(10, "s10").ok());
    ASSERT_TRUE(store->WriteSnapshot(10, "s10").ok());
    ASSERT_TRUE(store->WriteSnapshot(10, "other s10").ok());
  }
  ExpectStartUp(tmp.path(), 10, "other s10", 10);
}

TEST(SnapshotProtocol, RecordingASnapshotOutsideTheJournalChangesNothing) {
  TempDir tmp;
  auto store = MustOpen(tmp.path());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Commit(PayloadBatch(1, 5)).ok());
  auto info = WriteSnapshotFile(tmp.path(), 6, "s6");
  ASSERT_TRUE(info.ok());
  auto recorded = store->RecordSnapshot(*info);
  EXPECT_EQ(recorded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(store->failed());
  EXPECT_FALSE(store->has_snapshot());
}

TEST(SnapshotProtocol, JournalReaderSeesCommitsAfterItOpenedAndNamesAMissingRecord) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.truncate_records_per_commit = 100;
  auto store = Store::Open(options);
  ASSERT_TRUE(store.ok());
  auto reader = (*store)->NewJournalReader();
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_TRUE((*store)->Commit(PayloadBatch(1, 5000)).ok());
  uint64_t next = 11;
  Status read = (*reader)->Read(10, 5000, [&](uint64_t seq, std::string_view bytes) {
    EXPECT_EQ(seq, next);
    EXPECT_EQ(bytes, testing::RecordPayload(seq));
    ++next;
    return Status::Ok();
  });
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(next, 5001u);
  // Records a snapshot covers go away; a reader that needs them is told so.
  ASSERT_TRUE((*store)->WriteSnapshot(4000, "s4000").ok());
  ASSERT_TRUE((*store)->Commit(PayloadBatch(5001, 1)).ok());  // deletes 1..100
  read = (*reader)->Read(0, 10, [](uint64_t, std::string_view) { return Status::Ok(); });
  EXPECT_EQ(read.code(), StatusCode::kDataLoss);
  EXPECT_NE(read.message().find("journal record 1 "), std::string::npos) << read.message();
}

// A version 1 work dir: the same tables, but the snapshot as a blob in table
// `snapshot`.
void MakeVersion1(const std::string& dir) {
  {
    auto store = MustOpen(dir);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Commit(PayloadBatch(1, 30)).ok());
  }
  const std::string db = dir + "/dispatch.db";
  const std::string snapshot = "state after 20";
  char insert[256];
  std::snprintf(insert, sizeof(insert),
                "INSERT INTO snapshot (seq, crc, body) VALUES (20, %u, CAST('%s' AS BLOB));",
                SnapshotChecksum(20, snapshot), snapshot.c_str());
  ASSERT_EQ(RawSql(db, std::string("BEGIN;DROP TABLE snapshot_file;"
                                   "CREATE TABLE snapshot (seq INTEGER PRIMARY KEY, crc INTEGER "
                                   "NOT NULL, body BLOB NOT NULL);") +
                           insert + "DELETE FROM journal WHERE seq <= 20;PRAGMA user_version=1;COMMIT;"),
            "");
}

TEST(SnapshotProtocol, Version1DatabaseIsMigratedWithItsSnapshot) {
  TempDir tmp;
  MakeVersion1(tmp.path());
  ExpectStartUp(tmp.path(), 20, "state after 20", 30);
  // Migrated once; the next start-up reads version 2 as it is.
  ExpectStartUp(tmp.path(), 20, "state after 20", 30);
}

}  // namespace
}  // namespace dispatch::storage
