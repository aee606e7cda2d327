// The Store extends its WAL with zeros at open (StoreOptions.preallocate_wal),
// so that commits overwrite blocks the file has instead of appending: an
// append's fdatasync also writes the file's size and block map. Checked here:
// the WAL has its full size from the first commit on and commits stay inside
// it; and a disk too full to extend it only costs speed, never the start or
// an acknowledged record (the PowerLossVfs fails the extension's write, then
// drops whatever was not synced).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <random>
#include <string>
#include <vector>

#include "common/journal_batch.h"
#include "storage/store.h"
#include "tests/power_loss/power_loss_vfs.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

constexpr int kPageSize = 4096;  // SQLite's default, which the Store keeps

storage::StoreOptions Options(const std::string& dir) {
  storage::StoreOptions options;
  options.work_dir = dir;
  options.synchronous = storage::Synchronous::kFull;
  return options;
}

int64_t ExtendedWalSize(const storage::StoreOptions& options) {
  return 32 + static_cast<int64_t>(options.wal_restart_frames) * (kPageSize + 24);
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

std::string Payload(uint64_t seq) { return "record " + std::to_string(seq); }

// Commits Payload(first) .. Payload(last), one batch each.
void CommitRange(storage::Store& store, uint64_t first, uint64_t last) {
  for (uint64_t seq = first; seq <= last; ++seq) {
    JournalBatch batch;
    batch.AddRecord(Payload(seq));
    auto committed = store.Commit(batch);
    ASSERT_TRUE(committed.ok()) << committed.status().ToString();
    ASSERT_EQ(*committed, seq);
  }
}

void ExpectRecords(storage::Store& store, uint64_t last) {
  std::vector<std::string> seen;
  const Status replayed = store.Replay(0, [&](uint64_t seq, std::string_view bytes) {
    EXPECT_EQ(bytes, Payload(seq));
    seen.emplace_back(bytes);
    return Status::Ok();
  });
  ASSERT_TRUE(replayed.ok()) << replayed.ToString();
  EXPECT_EQ(seen.size(), last);
}

TEST(WalExtension, OpenExtendsTheWalAndCommitsStayInsideIt) {
  TempDir dir;
  const auto options = Options(dir.path());
  const std::string wal = dir.File("dispatch.db-wal");
  {
    auto store = storage::Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(FileSize(wal), ExtendedWalSize(options));
    CommitRange(**store, 1, 200);
    EXPECT_EQ(FileSize(wal), ExtendedWalSize(options)) << "a commit appended to the WAL";
  }
  // A clean close checkpoints and removes the WAL; the next open extends a
  // new one and has every record.
  auto store = storage::Store::Open(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(FileSize(wal), ExtendedWalSize(options));
  ExpectRecords(**store, 200);
}

TEST(WalExtension, AFullDiskWhileExtendingCostsSpeedButNeitherTheStartNorARecord) {
  TempDir dir;
  PowerLossVfs vfs;
  std::mt19937_64 rng(7);
  const auto options = Options(dir.path());
  const std::string wal = dir.File("dispatch.db-wal");
  {
    auto store = storage::Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    CommitRange(**store, 1, 3);
  }
  ASSERT_EQ(FileSize(wal), -1) << "the clean close kept the WAL: nothing left to extend";
  // On this open the first write is the extension's.
  vfs.FailAt(PowerLossVfs::Op::kWrite, 1, SQLITE_FULL);
  {
    auto store = storage::Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_TRUE(vfs.failure_injected());
    bool warned = false;
    for (const auto& warning : (*store)->open_warnings()) {
      warned = warned || warning.find("the disk is full") != std::string::npos;
    }
    EXPECT_TRUE(warned) << "no open warning says the WAL was not extended";
    EXPECT_LT(FileSize(wal), ExtendedWalSize(options));
    CommitRange(**store, 4, 6);
    // The power goes with the store still open: only what was synced stays.
    vfs.CrashNow();
  }
  vfs.LosePower(PowerLossVfs::LossMode::kDropUnsynced, rng);
  auto store = storage::Store::Open(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ExpectRecords(**store, 6);
  EXPECT_EQ(FileSize(wal), ExtendedWalSize(options));
}

}  // namespace
}  // namespace dispatch::testing
