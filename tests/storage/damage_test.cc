// Damaged storage: a flipped byte in a record, snapshot or dataset (through a
// second raw SQLite connection or in the file itself), missing records, a
// truncated or garbled database file, and a disk that fills up during a
// commit. Every case ends in a clear error naming what is damaged, or in
// exactly the data that was written; never a crash, never a silent partial state.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "storage/snapshot_file.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using testing::ChildProcess;
using testing::DatasetPayload;
using testing::HelperPath;
using testing::OptionsFor;
using testing::PayloadBatch;
using testing::RawSql;
using testing::ReadFile;
using testing::RecordPayload;
using testing::ReplayAll;
using testing::TempDir;
using testing::WriteFile;

constexpr uint64_t kRecords = 3000;

// Writes records 1..kRecords (plus dataset "ds" and, if asked, a snapshot at
// 100 whose journal prefix is then gone) and closes the store, which
// checkpoints everything into dispatch.db.
void WriteJournal(const std::string& dir, bool with_snapshot = false) {
  auto store = Store::Open(OptionsFor(dir, Synchronous::kNormal));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (uint64_t next = 1; next <= kRecords; next += 100) {
    JournalBatch batch = PayloadBatch(next, 100);
    if (next == 1) batch.PutDataset("ds", DatasetPayload("ds"));
    ASSERT_TRUE((*store)->Commit(batch).ok());
    if (with_snapshot && next == 1) {
      ASSERT_TRUE((*store)->WriteSnapshot(100, "snapshot at 100").ok());
    }
  }
}

// Open + load the snapshot + replay everything, as start-up does. Returns the
// first error, or checks the data is exactly what WriteJournal wrote.
Status StartUp(const std::string& dir) {
  auto store = Store::Open(OptionsFor(dir));
  if (!store.ok()) return store.status();
  auto snapshot = (*store)->LoadLatestSnapshot();
  if (!snapshot.ok()) return snapshot.status();
  const uint64_t base = snapshot->has_value() ? (*snapshot)->seq : 0;
  auto records = ReplayAll(**store, base);
  if (!records.ok()) return records.status();
  EXPECT_EQ((*store)->last_seq(), kRecords);
  EXPECT_EQ(records->size(), kRecords - base);
  for (const auto& [seq, bytes] : *records) {
    if (bytes != RecordPayload(seq)) {
      ADD_FAILURE() << "record " << seq << " came back different without an error";
      break;
    }
  }
  auto dataset = (*store)->GetDataset("ds");
  if (!dataset.ok()) return dataset.status();
  EXPECT_EQ(*dataset, DatasetPayload("ds"));
  return Status::Ok();
}

// Reads one blob with a raw connection, flips one byte, writes it back.
void FlipBlobByte(const std::string& db_path, const std::string& table, const std::string& column,
                  const std::string& where, size_t offset) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  std::string sql = "SELECT " + column + " FROM " + table + " WHERE " + where;
  ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  std::string bytes(static_cast<const char*>(sqlite3_column_blob(stmt, 0)),
                    sqlite3_column_bytes(stmt, 0));
  sqlite3_finalize(stmt);
  ASSERT_LT(offset, bytes.size());
  bytes[offset] ^= 0x20;
  sql = "UPDATE " + table + " SET " + column + " = ?1 WHERE " + where;
  ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK);
  sqlite3_bind_blob(stmt, 1, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_DONE);
  sqlite3_finalize(stmt);
  ASSERT_EQ(sqlite3_close(db), SQLITE_OK);
}

void ExpectError(const Status& status, StatusCode code, const std::string& needle) {
  EXPECT_EQ(status.code(), code) << status.ToString();
  EXPECT_NE(status.message().find(needle), std::string::npos)
      << "'" << needle << "' not in: " << status.message();
}

TEST(Damage, FlippedByteInARecordStopsReplayNamingItsSequenceNumber) {
  TempDir tmp;
  WriteJournal(tmp.path());
  FlipBlobByte(tmp.Sub("dispatch.db"), "journal", "body", "seq = 1234", 0);
  auto store = Store::Open(OptionsFor(tmp.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  uint64_t delivered = 0;
  Status status = (*store)->Replay(0, [&](uint64_t seq, std::string_view) {
    delivered = seq;
    return Status::Ok();
  });
  ExpectError(status, StatusCode::kDataLoss, "journal record 1234 in");
  EXPECT_NE(status.message().find("checksum"), std::string::npos);
  EXPECT_EQ(delivered, 1233u);  // nothing at or after the damage was handed out
}

TEST(Damage, FlippedByteInTheFileStopsReplayNamingItsSequenceNumber) {
  TempDir tmp;
  WriteJournal(tmp.path());
  // Find a record with a payload long enough to be unique in the file.
  uint64_t target = 2000;
  while (RecordPayload(target).size() < 64) ++target;
  const std::string db_file = tmp.Sub("dispatch.db");
  ASSERT_FALSE(std::filesystem::exists(db_file + "-wal")) << "the WAL was not checkpointed";
  std::string bytes = ReadFile(db_file);
  const size_t at = bytes.find(RecordPayload(target));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 10] ^= 0x01;
  WriteFile(db_file, bytes);
  ExpectError(StartUp(tmp.path()), StatusCode::kDataLoss,
              "journal record " + std::to_string(target) + " in");
}

TEST(Damage, MissingRecordInTheMiddleIsNamed) {
  TempDir tmp;
  WriteJournal(tmp.path());
  ASSERT_EQ(RawSql(tmp.Sub("dispatch.db"), "DELETE FROM journal WHERE seq IN (700, 701)"), "");
  ExpectError(StartUp(tmp.path()), StatusCode::kDataLoss,
              "missing records 700..701 (the next record present is 702)");
}

TEST(Damage, MissingFirstRecordFailsOpen) {
  TempDir tmp;
  WriteJournal(tmp.path(), /*with_snapshot=*/true);
  ASSERT_EQ(RawSql(tmp.Sub("dispatch.db"), "DELETE FROM journal WHERE seq = 101"), "");
  ExpectError(StartUp(tmp.path()), StatusCode::kDataLoss,
              "starts at record 102 but the latest snapshot is at record 100");
}

// The one snapshot file in `dir`.
std::string SnapshotFile(const std::string& dir) {
  auto names = testing::SnapshotFilesIn(dir);
  EXPECT_EQ(names.size(), 1u);
  return names.empty() ? "" : dir + "/" + names[0];
}

TEST(Damage, FlippedByteInTheSnapshotFileIsNamed) {
  TempDir tmp;
  WriteJournal(tmp.path(), /*with_snapshot=*/true);
  ASSERT_TRUE(StartUp(tmp.path()).ok());
  const std::string file = SnapshotFile(tmp.path());
  for (size_t offset : {size_t{3}, kSnapshotFileHeaderBytes + 3}) {  // header, then body
    SCOPED_TRACE("offset " + std::to_string(offset));
    std::string bytes = ReadFile(file);
    bytes[offset] ^= 0x20;
    WriteFile(file, bytes);
    ExpectError(StartUp(tmp.path()), StatusCode::kDataLoss, "snapshot file " + file);
    bytes[offset] ^= 0x20;
    WriteFile(file, bytes);
    ASSERT_TRUE(StartUp(tmp.path()).ok());
  }
}

TEST(Damage, MissingOrTruncatedSnapshotFileIsDataLossNamingIt) {
  TempDir tmp;
  WriteJournal(tmp.path(), /*with_snapshot=*/true);
  const std::string file = SnapshotFile(tmp.path());
  const std::string bytes = ReadFile(file);
  WriteFile(file, bytes.substr(0, bytes.size() - 1));
  ExpectError(StartUp(tmp.path()), StatusCode::kDataLoss, "snapshot file " + file);
  ASSERT_EQ(unlink(file.c_str()), 0);
  ExpectError(StartUp(tmp.path()), StatusCode::kDataLoss, file + " (the snapshot at record 100) is missing");
}

TEST(Damage, FlippedByteInADatasetDefinitionIsNamed) {
  TempDir tmp;
  WriteJournal(tmp.path());
  FlipBlobByte(tmp.Sub("dispatch.db"), "dataset", "body", "key = CAST('ds' AS BLOB)", 5);
  ExpectError(StartUp(tmp.path()), StatusCode::kDataLoss, "dataset 'ds' in");
}

TEST(Damage, TruncatedDatabaseFileIsDataLoss) {
  TempDir tmp;
  WriteJournal(tmp.path());
  const std::string db_file = tmp.Sub("dispatch.db");
  const std::string original = ReadFile(db_file);
  ASSERT_GT(original.size(), 100000u);
  for (size_t keep : {original.size() / 2, original.size() / 4, size_t{4096}, size_t{50}}) {
    SCOPED_TRACE("truncated to " + std::to_string(keep) + " bytes");
    WriteFile(db_file, original.substr(0, keep));
    const Status status = StartUp(tmp.path());
    ExpectError(status, StatusCode::kDataLoss, "journal database " + db_file + " is damaged");
  }
}

TEST(Damage, EmptyOrMissingDatabaseInAnInitializedWorkDirIsDataLoss) {
  TempDir tmp;
  WriteJournal(tmp.path());
  const std::string db_file = tmp.Sub("dispatch.db");
  WriteFile(db_file, "");
  ExpectError(StartUp(tmp.path()), StatusCode::kDataLoss, "is empty or was replaced");
  std::filesystem::remove(db_file);
  ExpectError(StartUp(tmp.path()), StatusCode::kDataLoss, "INITIALIZED");
}

TEST(Damage, GarbledMagicIsDataLossNamingTheFile) {
  TempDir tmp;
  WriteJournal(tmp.path());
  const std::string db_file = tmp.Sub("dispatch.db");
  std::string bytes = ReadFile(db_file);
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<char>(0xA5 ^ i);
  WriteFile(db_file, bytes);
  ExpectError(StartUp(tmp.path()), StatusCode::kDataLoss,
              "journal database " + db_file + " is damaged or not a database");
}

TEST(Damage, RandomlyGarbledHeaderGivesAnErrorOrTheIntactJournal) {
  const uint64_t seed =
      testing::TestSeed("Damage.RandomlyGarbledHeaderGivesAnErrorOrTheIntactJournal");
  std::mt19937_64 rng(seed);
  TempDir tmp;
  WriteJournal(tmp.path());
  const std::string db_file = tmp.Sub("dispatch.db");
  const std::string original = ReadFile(db_file);
  int errors = 0;
  for (int round = 0; round < 40; ++round) {
    std::string bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 4);
    std::string where;
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % 100;
      bytes[at] = static_cast<char>(bytes[at] ^ (1 + rng() % 255));
      where += " " + std::to_string(at);
    }
    SCOPED_TRACE("round " + std::to_string(round) + ", header bytes changed:" + where);
    WriteFile(db_file, bytes);
    std::filesystem::remove(db_file + "-wal");
    std::filesystem::remove(db_file + "-shm");
    const Status status = StartUp(tmp.path());  // checks exact data when ok
    if (!status.ok()) {
      ++errors;
      EXPECT_NE(status.message().find(db_file), std::string::npos) << status.ToString();
    }
  }
  std::printf("[ info     ] %d of 40 garbled headers were refused, the rest were harmless\n",
              errors);
}

TEST(Damage, FullDiskDuringCommitIsFailStopAndLosesNothingAcknowledged) {
  TempDir tmp;
  ChildProcess child(HelperPath(), {"fill", tmp.path(), "300000"});
  uint64_t acknowledged = 0;
  std::string failure;
  std::string retry;
  while (auto line = child.ReadLine(std::chrono::seconds(60))) {
    if (line->rfind("C ", 0) == 0) {
      acknowledged = std::stoull(line->substr(line->find(' ', 2) + 1));
    } else if (line->rfind("F ", 0) == 0) {
      failure = line->substr(2);
    } else if (line->rfind("R ", 0) == 0) {
      retry = line->substr(2);
    } else {
      ADD_FAILURE() << "helper: " << *line;
    }
  }
  const int status = child.Wait();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "helper status " << status;
  ASSERT_GT(acknowledged, 0u);
  ASSERT_FALSE(failure.empty()) << "the helper never reported its failed commit";
  std::printf("[ info     ] %llu records acknowledged, then: %s\n",
              static_cast<unsigned long long>(acknowledged), failure.c_str());
  EXPECT_NE(failure.find("dispatch.db"), std::string::npos) << failure;
  EXPECT_EQ(retry, "same");

  auto store = Store::Open(OptionsFor(tmp.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  // Every acknowledged record is there, and nothing of the failed batch.
  EXPECT_EQ((*store)->last_seq(), acknowledged);
  auto records = ReplayAll(**store, 0);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), acknowledged);
  for (const auto& [seq, bytes] : *records) ASSERT_EQ(bytes, RecordPayload(seq)) << seq;
  // With room again, the journal continues.
  EXPECT_TRUE((*store)->Commit(PayloadBatch(acknowledged + 1, 3)).ok());
}

}  // namespace
}  // namespace dispatch::storage
