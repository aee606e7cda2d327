// kill -9 at random moments: a helper process appends batches (with dataset
// puts, snapshots and background checkpoints) and reports each commit on a
// pipe the moment Commit returns; we SIGKILL it after a random number of
// reports, at least 20 times on the same work dir. After every kill, every
// reported record must be there, with its exact bytes, and start-up must be clean.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <string>

#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace dispatch::storage {
namespace {

using testing::ChildProcess;
using testing::DatasetPayload;
using testing::HelperPath;
using testing::OptionsFor;
using testing::RecordPayload;
using testing::ReplayAll;
using testing::SnapshotPayload;
using testing::TempDir;

constexpr int kRounds = 24;

struct Acknowledged {
  uint64_t last_seq = 0;
  uint64_t snapshot_seq = 0;
  std::set<uint64_t> dataset_batches;  // first seq of batches that put "ds-<first>"
};

void ParseReport(const std::string& line, Acknowledged& acked) {
  if (line.rfind("C ", 0) == 0) {
    const size_t space = line.find(' ', 2);
    const uint64_t first = std::stoull(line.substr(2, space - 2));
    const uint64_t last = std::stoull(line.substr(space + 1));
    ASSERT_EQ(first, acked.last_seq + 1) << "helper skipped sequence numbers: " << line;
    acked.last_seq = last;
    if (first % 5 == 0) acked.dataset_batches.insert(first);
  } else if (line.rfind("S ", 0) == 0) {
    acked.snapshot_seq = std::stoull(line.substr(2));
  } else {
    FAIL() << "helper: " << line;
  }
}

// Start-up after a kill: the snapshot and every acknowledged record are
// there; records after the last report (committed but not yet reported) are
// allowed and must be intact too. Returns the store's last_seq.
uint64_t VerifyAfterKill(const std::string& dir, const Acknowledged& acked) {
  auto store = Store::Open(OptionsFor(dir));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return 0;
  auto snapshot = (*store)->LoadLatestSnapshot();
  EXPECT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  if (!snapshot.ok()) return 0;
  uint64_t base = 0;
  if (snapshot->has_value()) {
    base = (*snapshot)->seq;
    EXPECT_GE(base, acked.snapshot_seq);
    EXPECT_EQ((*snapshot)->bytes, SnapshotPayload(base)) << "snapshot " << base;
  } else {
    EXPECT_EQ(acked.snapshot_seq, 0u);
  }
  auto records = ReplayAll(**store, base);
  EXPECT_TRUE(records.ok()) << records.status().ToString();
  if (!records.ok()) return 0;
  const uint64_t last = (*store)->last_seq();
  EXPECT_GE(last, acked.last_seq) << "an acknowledged record was lost";
  EXPECT_EQ(records->size(), last - base);
  for (const auto& [seq, bytes] : *records) {
    if (bytes != RecordPayload(seq)) {
      ADD_FAILURE() << "record " << seq << " has the wrong bytes";
      break;
    }
  }
  for (uint64_t first : acked.dataset_batches) {
    const std::string key = "ds-" + std::to_string(first);
    auto definition = (*store)->GetDataset(key);
    EXPECT_TRUE(definition.ok()) << definition.status().ToString();
    if (definition.ok()) {
      EXPECT_EQ(*definition, DatasetPayload(key)) << key;
    }
  }
  return last;
}

TEST(Crash, KillNineAtRandomMomentsLosesNoAcknowledgedRecord) {
  const uint64_t seed = testing::TestSeed("Crash.KillNineAtRandomMomentsLosesNoAcknowledgedRecord");
  std::mt19937_64 rng(seed);
  TempDir tmp;
  Acknowledged acked;
  int unreported_rounds = 0;  // kills that landed after a commit, before its report
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round) + " (seed " + std::to_string(seed) + ")");
    // Alternate FULL and NORMAL: both must survive a process crash.
    const char* sync = round % 2 == 0 ? "full" : "normal";
    ChildProcess child(HelperPath(), {"append", tmp.path(), std::to_string(rng()), sync});
    const int reports = 1 + static_cast<int>(rng() % 150);
    for (int i = 0; i < reports; ++i) {
      auto line = child.ReadLine(std::chrono::seconds(60));
      ASSERT_TRUE(line.has_value()) << "helper went quiet after " << i << " reports";
      ParseReport(*line, acked);
      if (::testing::Test::HasFatalFailure()) return;
    }
    // Spin a random amount so the kill lands anywhere in the next commit.
    volatile uint64_t spin = 0;
    const uint64_t spins = rng() % 2000000;
    for (uint64_t i = 0; i < spins; ++i) spin = spin + i;
    child.Kill(SIGKILL);
    const int status = child.Wait();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "helper exited on its own (status " << status << ")";
    // Reports written before the kill but not read yet count as acknowledged.
    while (auto line = child.ReadLine(std::chrono::milliseconds(0))) {
      ParseReport(*line, acked);
      if (::testing::Test::HasFatalFailure()) return;
    }
    const uint64_t last = VerifyAfterKill(tmp.path(), acked);
    if (::testing::Test::HasFailure()) return;
    if (last > acked.last_seq) ++unreported_rounds;
    // The next round continues the journal: whatever was committed but not
    // reported is now part of the history the helper builds on.
    acked.last_seq = last;
  }
  std::printf(
      "[ info     ] %d kills (%d between a commit and its report), %llu records, last snapshot "
      "at %llu\n",
      kRounds, unreported_rounds, static_cast<unsigned long long>(acked.last_seq),
      static_cast<unsigned long long>(acked.snapshot_seq));
}

}  // namespace
}  // namespace dispatch::storage
