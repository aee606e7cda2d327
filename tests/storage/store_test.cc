// Store round trips: commit, reopen, replay; snapshots and truncation; the
// dataset store; limits that refuse bad input without breaking the store; and
// fail-stop when the database cannot grow.
#include "storage/sqlite.h"
#include "storage/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <string>

#include "storage/format.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using testing::OptionsFor;
using testing::PayloadBatch;
using testing::RawSql;
using testing::RecordPayload;
using testing::ReplayAll;
using testing::TempDir;

std::unique_ptr<Store> MustOpen(const StoreOptions& options) {
  auto store = Store::Open(options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Replays everything after the snapshot and checks it is exactly
// RecordPayload(first..last).
void ExpectPayloads(Store& store, uint64_t first, uint64_t last) {
  auto records = ReplayAll(store, first - 1);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), last - first + 1);
  for (size_t i = 0; i < records->size(); ++i) {
    ASSERT_EQ((*records)[i].first, first + i);
    ASSERT_EQ((*records)[i].second, RecordPayload(first + i)) << "record " << first + i;
  }
}

// One integer a query returns, read through a connection of its own (-1 on
// any error).
int64_t QueryOne(const std::string& db_path, const std::string& sql) {
  auto db = OpenSqlite(db_path, SQLITE_OPEN_READONLY, db_path);
  if (!db.ok()) return -1;
  auto value = QueryInt(db->get(), sql.c_str(), sql);
  return value.ok() ? *value : -1;
}

int64_t CountRows(const std::string& db_path, const std::string& table) {
  return QueryOne(db_path, "SELECT count(*) FROM " + table);
}

TEST(Store, OpenCreatesTheWorkDirAndAnEmptyJournal) {
  TempDir tmp;
  const std::string dir = tmp.Sub("a/b/work");
  auto store = MustOpen(OptionsFor(dir));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->last_seq(), 0u);
  EXPECT_FALSE(store->has_snapshot());
  struct stat st;
  EXPECT_EQ(stat((dir + "/dispatch.db").c_str(), &st), 0);
  EXPECT_EQ(stat((dir + "/LOCK").c_str(), &st), 0);
  auto records = ReplayAll(*store, 0);
  ASSERT_TRUE(records.ok());
  EXPECT_TRUE(records->empty());
}

TEST(Store, CommitAssignsContiguousSequenceNumbers) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  auto last = store->Commit(PayloadBatch(1, 3));
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(*last, 3u);
  last = store->Commit(PayloadBatch(4, 1));
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, 4u);
  EXPECT_EQ(store->last_seq(), 4u);
  ExpectPayloads(*store, 1, 4);
}

TEST(Store, EmptyBatchWritesNothing) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Commit(PayloadBatch(1, 2)).ok());
  auto last = store->Commit(JournalBatch());
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, 2u);
  EXPECT_EQ(CountRows(store->db_path(), "journal"), 2);
}

TEST(Store, ReopenReplaysEveryBatchInOrder) {
  for (Synchronous sync : {Synchronous::kFull, Synchronous::kNormal}) {
    TempDir tmp;
    uint64_t next = 1;
    {
      auto store = MustOpen(OptionsFor(tmp.path(), sync));
      ASSERT_NE(store, nullptr);
      for (int size : {1, 5, 16, 2, 100}) {
        auto last = store->Commit(PayloadBatch(next, size));
        ASSERT_TRUE(last.ok()) << last.status().ToString();
        next += size;
        ASSERT_EQ(*last, next - 1);
      }
    }
    auto store = MustOpen(OptionsFor(tmp.path(), sync));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->last_seq(), next - 1);
    ExpectPayloads(*store, 1, next - 1);
    // Commits continue where the journal ended.
    auto last = store->Commit(PayloadBatch(next, 1));
    ASSERT_TRUE(last.ok());
    EXPECT_EQ(*last, next);
  }
}

TEST(Store, ReplayFromTheMiddleStartsAfterThatRecord) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Commit(PayloadBatch(1, 10)).ok());
  ExpectPayloads(*store, 7, 10);
  auto none = ReplayAll(*store, 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(Store, ReplayBeyondTheLastRecordIsInvalidArgument) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Commit(PayloadBatch(1, 2)).ok());
  auto records = ReplayAll(*store, 3);
  ASSERT_FALSE(records.ok());
  EXPECT_EQ(records.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(records.status().message().find("after record 3"), std::string::npos)
      << records.status().message();
}

TEST(Store, ReplayCallbackErrorStopsReplayAndNamesTheRecord) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Commit(PayloadBatch(1, 5)).ok());
  int calls = 0;
  Status status = store->Replay(0, [&](uint64_t seq, std::string_view) {
    ++calls;
    return seq == 3 ? InvalidArgumentError("does not decode") : Status::Ok();
  });
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "replaying journal record 3: does not decode");
  // The store is still usable after a failed replay.
  EXPECT_TRUE(store->Commit(PayloadBatch(6, 1)).ok());
}

TEST(Store, CommitInsideReplayIsRefused) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Commit(PayloadBatch(1, 1)).ok());
  Status inner;
  ASSERT_TRUE(store
                  ->Replay(0,
                           [&](uint64_t, std::string_view) {
                             inner = store->Commit(PayloadBatch(2, 1)).status();
                             return Status::Ok();
                           })
                  .ok());
  EXPECT_EQ(inner.code(), StatusCode::kInternal);
  EXPECT_FALSE(store->failed());
}

TEST(Store, SnapshotThenReopenGivesSnapshotPlusTail) {
  TempDir tmp;
  {
    auto store = MustOpen(OptionsFor(tmp.path()));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Commit(PayloadBatch(1, 10)).ok());
    ASSERT_TRUE(store->WriteSnapshot(10, "state after 10").ok());
    ASSERT_TRUE(store->Commit(PayloadBatch(11, 5)).ok());
    EXPECT_EQ(store->journal_length(), 5u);
  }
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->last_seq(), 15u);
  EXPECT_EQ(store->snapshot_seq(), 10u);
  auto snapshot = store->LoadLatestSnapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  ASSERT_TRUE(snapshot->has_value());
  EXPECT_EQ((*snapshot)->seq, 10u);
  EXPECT_EQ((*snapshot)->bytes, "state after 10");
  ExpectPayloads(*store, 11, 15);
}

TEST(Store, SnapshotCoveredRecordsAreDeletedASliceAtATimeByLaterCommits) {
  TempDir tmp;
  std::string db_path;
  StoreOptions options = OptionsFor(tmp.path());
  options.truncate_records_per_commit = 5;
  {
    auto store = MustOpen(options);
    ASSERT_NE(store, nullptr);
    db_path = store->db_path();
    ASSERT_TRUE(store->Commit(PayloadBatch(1, 20)).ok());
    ASSERT_TRUE(store->WriteSnapshot(12, "s12").ok());
    // Recording the snapshot deletes nothing by itself...
    EXPECT_EQ(CountRows(db_path, "journal"), 20);
    EXPECT_EQ(store->pending_truncation(), 12u);
    // ... but replaying from before the snapshot is refused all the same.
    auto early = ReplayAll(*store, 5);
    ASSERT_FALSE(early.ok());
    EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition);
    // Each later commit deletes at most one slice of what the snapshot covers.
    const int64_t expected_left[] = {7, 2, 0, 0};
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(store->Commit(PayloadBatch(21 + i, 1)).ok());
      EXPECT_EQ(CountRows(db_path, "journal WHERE seq <= 12"), expected_left[i]) << "commit " << i;
    }
    EXPECT_EQ(store->pending_truncation(), 0u);
    EXPECT_EQ(store->journal_first_seq(), 13u);
  }
  EXPECT_EQ(CountRows(db_path, "journal"), 12);
  EXPECT_EQ(CountRows(db_path, "snapshot_file"), 1);
  auto store = MustOpen(options);
  ASSERT_NE(store, nullptr);
  ExpectPayloads(*store, 13, 24);
}

// A slice is bounded by bytes as well as by records: big covered records are
// deleted a few per commit (at least one), more when the commit itself writes
// more, so truncation never turns into one long delete on the loop thread.
TEST(Store, SnapshotCoveredRecordsAreDeletedInSlicesBoundedByBytes) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.truncate_records_per_commit = 100;
  options.truncate_bytes_per_commit = 10 << 10;
  auto store = MustOpen(options);
  ASSERT_NE(store, nullptr);
  const std::string db_path = store->db_path();
  JournalBatch big;
  for (int i = 0; i < 20; ++i) big.AddRecord(std::string(4 << 10, static_cast<char>('a' + i)));
  big.AddRecord(std::string(30 << 10, 'z'));  // record 21: over the budget on its own
  for (int i = 0; i < 4; ++i) big.AddRecord(std::string(4 << 10, 'y'));
  ASSERT_TRUE(store->Commit(big).ok());
  ASSERT_TRUE(store->WriteSnapshot(25, "s25").ok());

  auto commit_one = [&](size_t bytes) {
    JournalBatch batch;
    batch.AddRecord(std::string(bytes, 'n'));
    ASSERT_TRUE(store->Commit(batch).ok());
  };
  // A small commit: 10 KiB of 4 KiB records is two of them.
  commit_one(10);
  EXPECT_EQ(store->journal_first_seq(), 3u);
  EXPECT_EQ(CountRows(db_path, "journal WHERE seq <= 25"), 23);
  // A commit of 12 KiB may delete 24 KiB: six records.
  commit_one(12 << 10);
  EXPECT_EQ(store->journal_first_seq(), 9u);
  for (int i = 0; i < 6; ++i) commit_one(10);
  EXPECT_EQ(store->journal_first_seq(), 21u);
  // A record over the budget still goes, alone.
  commit_one(10);
  EXPECT_EQ(store->journal_first_seq(), 22u);
  commit_one(10);
  commit_one(10);
  EXPECT_EQ(store->journal_first_seq(), 26u);
  EXPECT_EQ(store->pending_truncation(), 0u);
  EXPECT_EQ(CountRows(db_path, "journal WHERE seq <= 25"), 0);
  EXPECT_EQ(CountRows(db_path, "journal"), static_cast<int64_t>(store->last_seq() - 25));
}

TEST(Store, ReopenWithCoveredRecordsStillPresentReplaysOnlyAfterTheSnapshot) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.truncate_records_per_commit = 3;
  {
    auto store = MustOpen(options);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Commit(PayloadBatch(1, 30)).ok());
    ASSERT_TRUE(store->WriteSnapshot(20, "s20").ok());
    ASSERT_TRUE(store->Commit(PayloadBatch(31, 2)).ok());  // deletes 1..3 only
  }
  // As after a crash in the middle of the truncation: 4..20 are still there.
  auto store = MustOpen(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->snapshot_seq(), 20u);
  EXPECT_EQ(store->journal_first_seq(), 4u);
  EXPECT_EQ(store->last_seq(), 32u);
  auto snapshot = store->LoadLatestSnapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_EQ((*snapshot)->bytes, "s20");
  ExpectPayloads(*store, 21, 32);
  ASSERT_TRUE(store->Commit(PayloadBatch(33, 1)).ok());
  EXPECT_EQ(store->journal_first_seq(), 7u);
}

TEST(Store, NewerSnapshotReplacesTheOlderOne) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Commit(PayloadBatch(1, 10)).ok());
  ASSERT_TRUE(store->WriteSnapshot(4, "s4").ok());
  ASSERT_TRUE(store->WriteSnapshot(9, "s9").ok());
  EXPECT_EQ(CountRows(store->db_path(), "snapshot_file"), 1);
  EXPECT_EQ(testing::SnapshotFilesIn(tmp.path()).size(), 1u) << "the older file was not removed";
  auto snapshot = store->LoadLatestSnapshot();
  ASSERT_TRUE(snapshot.ok());
  EXPECT_EQ((*snapshot)->seq, 9u);
  EXPECT_EQ((*snapshot)->bytes, "s9");
  ExpectPayloads(*store, 10, 10);
}

TEST(Store, SnapshotOutsideTheJournalIsInvalidArgument) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Commit(PayloadBatch(1, 5)).ok());
  Status ahead = store->WriteSnapshot(6, "x");
  EXPECT_EQ(ahead.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ahead.message().find("record 6"), std::string::npos) << ahead.message();
  ASSERT_TRUE(store->WriteSnapshot(4, "s4").ok());
  EXPECT_EQ(store->WriteSnapshot(3, "older").code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(store->failed());
}

TEST(Store, OversizedSnapshotIsRefusedWithoutFailStop) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.max_snapshot_bytes = 1000;
  auto store = MustOpen(options);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Commit(PayloadBatch(1, 5)).ok());
  Status status = store->WriteSnapshot(5, std::string(1001, 's'));
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("snapshot at record 5"), std::string::npos) << status.message();
  EXPECT_FALSE(store->has_snapshot());
  EXPECT_FALSE(store->failed());
  EXPECT_TRUE(store->WriteSnapshot(5, std::string(1000, 's')).ok());
}

TEST(Store, PeriodicSnapshotsKeepTheJournalBounded) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path(), Synchronous::kNormal));
  ASSERT_NE(store, nullptr);
  for (uint64_t next = 1; next <= 5000; next += 50) {
    ASSERT_TRUE(store->Commit(PayloadBatch(next, 50)).ok());
    if (store->journal_length() >= 500) {
      ASSERT_TRUE(store->WriteSnapshot(store->last_seq(), "state").ok());
    }
    // N since the snapshot, plus what the snapshot covers until the next
    // commit deletes it (one slice, 2048 by default, is more than N here).
    ASSERT_LE(CountRows(store->db_path(), "journal"), 500 + 50);
  }
  EXPECT_EQ(store->last_seq(), 5000u);
}

TEST(Store, DatasetPutIsReadBackAfterReopen) {
  TempDir tmp;
  {
    auto store = MustOpen(OptionsFor(tmp.path()));
    ASSERT_NE(store, nullptr);
    JournalBatch batch = PayloadBatch(1, 1);
    batch.PutDataset("fingerprint-17", "definition bytes");
    batch.PutDataset(std::string("bin\0key", 7), std::string("\0\1\2", 3));
    ASSERT_TRUE(store->Commit(batch).ok());
    JournalBatch replace;
    replace.PutDataset("fingerprint-17", "replaced");
    auto last = store->Commit(replace);
    ASSERT_TRUE(last.ok());
    EXPECT_EQ(*last, 1u);  // dataset puts take no sequence number
  }
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  auto definition = store->GetDataset("fingerprint-17");
  ASSERT_TRUE(definition.ok()) << definition.status().ToString();
  EXPECT_EQ(*definition, "replaced");
  auto binary = store->GetDataset(std::string("bin\0key", 7));
  ASSERT_TRUE(binary.ok());
  EXPECT_EQ(*binary, std::string("\0\1\2", 3));
}

TEST(Store, UnknownDatasetIsNotFoundNamingTheKey) {
  TempDir tmp;
  auto store = MustOpen(OptionsFor(tmp.path()));
  ASSERT_NE(store, nullptr);
  auto definition = store->GetDataset("no-such-dataset");
  ASSERT_FALSE(definition.ok());
  EXPECT_EQ(definition.status().code(), StatusCode::kNotFound);
  EXPECT_NE(definition.status().message().find("'no-such-dataset'"), std::string::npos)
      << definition.status().message();
}

TEST(Store, OversizedDatasetIsRefusedAndNothingOfItsBatchIsWritten) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.max_dataset_bytes = 1000;
  auto store = MustOpen(options);
  ASSERT_NE(store, nullptr);
  JournalBatch batch = PayloadBatch(1, 3);
  batch.PutDataset("big", std::string(1001, 'x'));
  auto last = store->Commit(batch);
  ASSERT_FALSE(last.ok());
  EXPECT_EQ(last.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(last.status().message().find("'big'"), std::string::npos);
  EXPECT_EQ(store->last_seq(), 0u);
  EXPECT_EQ(CountRows(store->db_path(), "journal"), 0);
  EXPECT_EQ(store->GetDataset("big").status().code(), StatusCode::kNotFound);
  // Bad input is not a storage failure: the next batch commits.
  EXPECT_FALSE(store->failed());
  JournalBatch fits = PayloadBatch(1, 1);
  fits.PutDataset("small", std::string(1000, 'y'));
  ASSERT_TRUE(store->Commit(fits).ok());
  EXPECT_EQ(store->GetDataset("small").value(), std::string(1000, 'y'));
}

TEST(Store, OversizedRecordAndEmptyKeyAreRefused) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.max_record_bytes = 100;
  auto store = MustOpen(options);
  ASSERT_NE(store, nullptr);
  JournalBatch batch;
  batch.AddRecord(std::string(100, 'a'));
  batch.AddRecord(std::string(101, 'b'));
  auto last = store->Commit(batch);
  EXPECT_EQ(last.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(last.status().message().find("record 2"), std::string::npos);
  JournalBatch empty_key;
  empty_key.PutDataset("", "x");
  EXPECT_EQ(store->Commit(empty_key).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CountRows(store->db_path(), "journal"), 0);
  EXPECT_FALSE(store->failed());
}

TEST(Store, FullDatabaseIsFailStopAndNothingUnacknowledgedIsCommitted) {
  TempDir tmp;
  StoreOptions options = OptionsFor(tmp.path());
  options.max_db_bytes = 256 * 1024;
  uint64_t acknowledged = 0;
  Status failure;
  {
    auto store = MustOpen(options);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 1000 && failure.ok(); ++i) {
      auto last = store->Commit(PayloadBatch(acknowledged + 1, 20));
      if (last.ok()) {
        acknowledged = *last;
      } else {
        failure = last.status();
      }
    }
    ASSERT_FALSE(failure.ok()) << "the database never filled up";
    EXPECT_EQ(failure.code(), StatusCode::kResourceExhausted) << failure.ToString();
    EXPECT_NE(failure.message().find("dispatch.db"), std::string::npos) << failure.message();
    EXPECT_TRUE(store->failed());
    EXPECT_EQ(store->last_seq(), acknowledged);
    // Fail-stop: even a tiny batch, a snapshot and a dataset put are refused
    // with the original error.
    JournalBatch tiny;
    tiny.AddRecord("x");
    EXPECT_EQ(store->Commit(tiny).status(), failure);
    JournalBatch dataset_only;
    dataset_only.PutDataset("k", "v");
    EXPECT_EQ(store->Commit(dataset_only).status(), failure);
    EXPECT_EQ(store->WriteSnapshot(acknowledged, "s"), failure);
  }
  options.max_db_bytes = 0;
  auto store = MustOpen(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->last_seq(), acknowledged);
  ExpectPayloads(*store, 1, acknowledged);
}

TEST(Store, ForeignSqliteDatabaseIsRefused) {
  TempDir tmp;
  ASSERT_EQ(RawSql(tmp.Sub("dispatch.db"), "CREATE TABLE t (x)"), "");
  auto store = Store::Open(OptionsFor(tmp.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("not a dispatch journal"), std::string::npos)
      << store.status().message();
}

// Version 2 has version 3's schema (3 only adds result files beside it):
// it opens with its records, and is renumbered so that a build reading only
// version 2 refuses it from then on.
TEST(Store, AVersion2WorkDirOpensAndIsRenumbered) {
  TempDir tmp;
  {
    auto store = MustOpen(OptionsFor(tmp.path()));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Commit(PayloadBatch(1, 3)).ok());
  }
  ASSERT_EQ(RawSql(tmp.Sub("dispatch.db"), "PRAGMA user_version=2"), "");
  ASSERT_EQ(QueryOne(tmp.Sub("dispatch.db"), "PRAGMA user_version"), 2);
  {
    auto store = MustOpen(OptionsFor(tmp.path()));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->last_seq(), 3u);
  }
  EXPECT_EQ(QueryOne(tmp.Sub("dispatch.db"), "PRAGMA user_version"), kFormatVersion);
  EXPECT_EQ(kFormatVersion, 3);
}

TEST(Store, NewerFormatVersionIsRefused) {
  TempDir tmp;
  { ASSERT_NE(MustOpen(OptionsFor(tmp.path())), nullptr); }
  ASSERT_EQ(RawSql(tmp.Sub("dispatch.db"), "PRAGMA user_version=99"), "");
  auto store = Store::Open(OptionsFor(tmp.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("format version 99"), std::string::npos)
      << store.status().message();
}

}  // namespace
}  // namespace dispatch::storage
