// Backups of a work dir (database_backup.h, backup_dir.h): the copy opens as
// a work dir with every record, the snapshot and the result files, commits
// made between its steps included; an interrupted backup is refused at
// start, never taken for an empty work dir; a target that is not new or
// empty is refused untouched; files on another file system are copied from
// descriptors opened in the copy's last turn, even if removed meanwhile, and
// no more of them than the limit.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "storage/backup_dir.h"
#include "storage/file_io.h"
#include "storage/result_file.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using testing::OptionsFor;
using testing::PayloadBatch;
using testing::ReplayAll;
using testing::TempDir;
using testing::WriteFile;

// The steps the reactor runs (OnlineBackup), on this thread, committing
// `commit_between` batches of records between the copy's steps.
Result<CompletedBackup> BackUp(Store& store, const std::string& target, int pages_per_step,
                               int commit_between = 0) {
  bool created = false;
  DISPATCH_RETURN_IF_ERROR(PrepareBackupDir(target, &created));
  auto copy = store.StartBackup(target + "/" + kPartialDatabaseName);
  if (!copy.ok()) return copy.status();
  while (true) {
    auto done = (*copy)->Step(pages_per_step);
    if (!done.ok()) return done.status();
    if (*done) break;
    if (commit_between > 0) {
      --commit_between;
      auto committed = store.Commit(PayloadBatch(store.last_seq() + 1, 20));
      if (!committed.ok()) return committed.status();
    }
  }
  const std::string snapshot =
      store.latest_snapshot().has_value() ? store.latest_snapshot()->name : std::string();
  auto pinned = PinWorkDirFiles(store.work_dir(), snapshot, target, 16);
  if (!pinned.ok()) return pinned.status();
  return CompleteBackupDir(target, *pinned, store.last_seq());
}

ino_t Inode(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST(BackupDir, ACopyOpensWithEveryRecordTheSnapshotAndTheResultFiles) {
  TempDir dir;
  const std::string target = dir.Sub("backup");
  auto store = Store::Open(OptionsFor(dir.Sub("work")));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Store& live = **store;
  ASSERT_TRUE(live.Commit(PayloadBatch(1, 300)).ok());
  ASSERT_TRUE(live.WriteSnapshot(300, "the state after 300").ok());
  ASSERT_TRUE(live.Commit(PayloadBatch(301, 300)).ok());
  ASSERT_TRUE(WriteResultFile(live.result_dir(), 7, 1, std::string(10000, 'r')).ok());
  auto done = BackUp(live, target, /*pages_per_step=*/2, /*commit_between=*/5);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_GT(done->database_bytes, 0u);
  EXPECT_EQ(done->copied_bytes, 0u) << "on one file system every file is linked";
  const uint64_t last = live.last_seq();
  EXPECT_GT(last, 600u) << "no commit ran between the steps";
  auto live_records = ReplayAll(live, live.snapshot_seq());
  ASSERT_TRUE(live_records.ok());
  const std::string result = "/results/" + ResultFileName(7, 1);
  EXPECT_EQ(Inode(target + result), Inode(live.work_dir() + result));
  EXPECT_FALSE(std::filesystem::exists(target + "/" + kPartialDatabaseName));
  // The live store goes on; the copy does not move with it.
  ASSERT_TRUE(live.Commit(PayloadBatch(last + 1, 10)).ok());

  auto copy = Store::Open(OptionsFor(target));
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_TRUE((*copy)->open_warnings().empty()) << (*copy)->open_warnings()[0];
  EXPECT_EQ((*copy)->last_seq(), last);
  EXPECT_EQ((*copy)->commit_mark().seq, last);
  auto snapshot = (*copy)->LoadLatestSnapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  ASSERT_TRUE(snapshot->has_value());
  EXPECT_EQ((*snapshot)->bytes, "the state after 300");
  auto copied_records = ReplayAll(**copy, (*copy)->snapshot_seq());
  ASSERT_TRUE(copied_records.ok()) << copied_records.status().ToString();
  EXPECT_EQ(*copied_records, *live_records);
  EXPECT_TRUE(CheckResultFile((*copy)->result_dir(), {7, 1}).ok());
}

TEST(BackupDir, AnInterruptedBackupIsRefusedAtStartNotTakenForAnEmptyWorkDir) {
  TempDir dir;
  const std::string target = dir.Sub("backup");
  bool created = false;
  ASSERT_TRUE(PrepareBackupDir(target, &created).ok());
  EXPECT_TRUE(created);
  WriteFile(target + "/" + kPartialDatabaseName, std::string(4096, 'x'));
  auto opened = Store::Open(OptionsFor(target));
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kDataLoss) << opened.status().ToString();
  EXPECT_NE(opened.status().message().find("INITIALIZED"), std::string::npos);
  RemoveBackupDir(target, created);
  EXPECT_FALSE(std::filesystem::exists(target));
}

TEST(BackupDir, ATargetThatIsNotNewOrEmptyIsRefusedUntouched) {
  TempDir dir;
  bool created = true;
  WriteFile(dir.Sub("file"), "mine");
  Status status = PrepareBackupDir(dir.Sub("file"), &created);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_FALSE(created);
  EXPECT_EQ(testing::ReadFile(dir.Sub("file")), "mine");

  std::filesystem::create_directories(dir.Sub("full"));
  WriteFile(dir.Sub("full/notes"), "mine");
  status = PrepareBackupDir(dir.Sub("full"), &created);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find("not empty (it holds notes)"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("full/INITIALIZED")));

  status = PrepareBackupDir(dir.Sub("missing/backup"), &created);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("missing")));
}

// /dev/shm is a tmpfs on Linux: another file system than $TMPDIR's disk.
std::string OtherFileSystem(const std::string& dir) {
  struct stat a, b;
  if (stat(dir.c_str(), &a) != 0 || stat("/dev/shm", &b) != 0 || a.st_dev == b.st_dev) return "";
  char pattern[] = "/dev/shm/dispatch-backup-test-XXXXXX";
  return mkdtemp(pattern) != nullptr ? std::string(pattern) : "";
}

TEST(BackupDir, FilesOnAnotherFileSystemAreCopiedEvenIfRemovedBeforeTheCopy) {
  TempDir dir;
  const std::string other = OtherFileSystem(dir.path());
  if (other.empty()) GTEST_SKIP() << "no second file system (/dev/shm) to back up to";
  const std::string target = other + "/backup";
  auto store = Store::Open(OptionsFor(dir.Sub("work")));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Store& live = **store;
  ASSERT_TRUE(live.Commit(PayloadBatch(1, 50)).ok());
  ASSERT_TRUE(live.WriteSnapshot(50, "the state after 50").ok());
  const std::string body(300000, 'b');
  ASSERT_TRUE(WriteResultFile(live.result_dir(), 9, 2, body).ok());
  bool created = false;
  ASSERT_TRUE(PrepareBackupDir(target, &created).ok());
  auto copy = live.StartBackup(target + "/" + kPartialDatabaseName);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  while (true) {
    auto done = (*copy)->Step(64);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    if (*done) break;
  }
  copy->reset();
  auto pinned = PinWorkDirFiles(live.work_dir(), live.latest_snapshot()->name, target, 16);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned->opened(), 2u);
  EXPECT_EQ(pinned->linked(), 0u);
  // The dispatcher removes the result file (its release became durable)
  // before the pool copies it: the descriptor still reads it.
  ASSERT_TRUE(RemoveResultFile(live.result_dir(), {9, 2}).ok());
  auto done = CompleteBackupDir(target, *pinned, live.last_seq());
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_GT(done->copied_bytes, body.size());
  auto result = CheckResultFile(target + "/results", {9, 2});
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  auto opened = Store::Open(OptionsFor(target));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto snapshot = (*opened)->LoadLatestSnapshot();
  ASSERT_TRUE(snapshot.ok() && snapshot->has_value()) << snapshot.status().ToString();
  EXPECT_EQ((*snapshot)->bytes, "the state after 50");
  opened->reset();
  std::filesystem::remove_all(other);
}

TEST(BackupDir, NoMoreFilesThanTheLimitAreHeldOpenToCopy) {
  TempDir dir;
  const std::string other = OtherFileSystem(dir.path());
  if (other.empty()) GTEST_SKIP() << "no second file system (/dev/shm) to back up to";
  const std::string work = dir.Sub("work");
  std::filesystem::create_directories(work + "/results");
  for (uint64_t id : {1, 2, 3}) {
    ASSERT_TRUE(WriteResultFile(work + "/results", id, 1, "result").ok());
  }
  bool created = false;
  ASSERT_TRUE(PrepareBackupDir(other + "/backup", &created).ok());
  auto pinned = PinWorkDirFiles(work, "", other + "/backup", 2);
  ASSERT_FALSE(pinned.ok());
  EXPECT_EQ(pinned.status().code(), StatusCode::kResourceExhausted) << pinned.status().ToString();
  EXPECT_NE(pinned.status().message().find("2 files are to be copied already"), std::string::npos);
  auto within = PinWorkDirFiles(work, "", other + "/backup", 3);
  ASSERT_TRUE(within.ok()) << within.status().ToString();
  EXPECT_EQ(within->opened(), 3u);
  std::filesystem::remove_all(other);
}

}  // namespace
}  // namespace dispatch::storage
