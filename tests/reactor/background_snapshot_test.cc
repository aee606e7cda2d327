// Background snapshots (issue 12, section 2): a snapshot never holds a commit
// or a reply, not even the first one after recovering a long journal; a task
// that fails before or after writing its file loses nothing and is retried; a
// kill -9 at any moment of the protocol restarts to exactly the state that
// was acknowledged.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>

#include "reactor/durable_state.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "storage/snapshot_file.h"
#include "storage/store.h"
#include "tests/reactor/opened_durable.h"
#include "tests/state/update_generator.h"
#include "tests/support/loop_passes.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"
#include "tests/support/wait_until.h"

namespace dispatch::reactor {
namespace {

using state::testing::UpdateGenerator;

Opened Open(uv_loop_t* loop, const std::string& dir, DurableStateOptions options,
            size_t max_snapshot_bytes = 512u << 20) {
  storage::StoreOptions store_options = LogicStoreOptions(dir);
  store_options.max_snapshot_bytes = max_snapshot_bytes;
  return OpenDurable(loop, store_options, std::move(options));
}

std::vector<std::string> SnapshotFiles(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (storage::IsSnapshotFileName(name)) names.push_back(name);
  }
  return names;
}

// One pass: `count` generated updates, then the pass's commit.
void Pass(DurableState& durable, UpdateGenerator& generator, int count) {
  for (int i = 0; i < count; ++i) {
    ASSERT_TRUE(durable.pipeline().Submit(generator.Next(durable.state()).reader()).ok());
  }
  durable.EndOfPass();
  ASSERT_FALSE(durable.pipeline().failed());
}

// A snapshot of many entities may take a while on a loaded machine: waits
// for one get twice the usual deadline.
constexpr std::chrono::seconds kSnapshotDeadline(60);

class BackgroundSnapshotTest : public ::testing::Test {
 protected:
  uvkj::UvLoop loop_;
  testing::TempDir dir_;
};

TEST_F(BackgroundSnapshotTest, ASnapshotHoldsNoCommitAndIsRecordedWhenTheTaskIsDone) {
  const uint64_t seed = testing::TestSeed();
  UpdateGenerator generator(seed);
  uint64_t started_at = 0, live_digest = 0, last = 0;
  {
    Opened live = Open(loop_.get(), dir_.path(), {.snapshot_every = 1000});
    DurableState& durable = *live.durable;
    while (live.store->last_seq() < 1000) Pass(durable, generator, 50);
    // The pass that crossed N committed and returned: the snapshot was not
    // written by it (today's dispatcher wrote it right there, holding replies).
    started_at = live.store->last_seq();
    EXPECT_EQ(live.store->snapshot_seq(), 0u) << "the commit wrote the snapshot itself";
    EXPECT_EQ(durable.compaction().stats().snapshots, 0u);
    // The loop keeps committing while the replica catches up and writes.
    for (int i = 0; i < 5; ++i) Pass(durable, generator, 50);
    ASSERT_TRUE(testing::WaitUntil([&]() { return durable.compaction().stats().snapshots == 1; },
                                   testing::LoopPasses(loop_.get()), kSnapshotDeadline));
    EXPECT_EQ(live.store->snapshot_seq(), started_at) << "the snapshot is the state when it started";
    EXPECT_EQ(durable.compaction().stats().snapshot_failures, 0u);
    EXPECT_GT(durable.compaction().stats().last_snapshot_bytes, 0u);
    live_digest = durable.state().Digest();
    last = live.store->last_seq();
    EXPECT_EQ(SnapshotFiles(dir_.path()).size(), 1u);
  }
  Opened replayed = Open(loop_.get(), dir_.path(), {.snapshot_every = 0});
  EXPECT_EQ(replayed.store->snapshot_seq(), started_at);
  EXPECT_EQ(replayed.durable->recovery().replayed, last - started_at);
  EXPECT_EQ(replayed.durable->state().Digest(), live_digest);
}

TEST_F(BackgroundSnapshotTest, TheFirstReplyAfterRecoveringALongJournalDoesNotWaitForASnapshot) {
  const uint64_t seed = testing::TestSeed();
  UpdateGenerator generator(seed);
  {
    Opened live = Open(loop_.get(), dir_.path(), {.snapshot_every = 0});
    while (live.store->last_seq() < 3000) Pass(*live.durable, generator, 64);
  }
  // A crash left 3000 records and no snapshot; N is 1000.
  Opened reopened = Open(loop_.get(), dir_.path(), {.snapshot_every = 1000});
  DurableState& durable = *reopened.durable;
  uvkj::UvAsyncIo io(loop_.get());
  ASSERT_TRUE(durable.pipeline().Submit(generator.Next(durable.state()).reader()).ok());
  auto reply = durable.pipeline().Barrier();
  durable.EndOfPass();
  // The reply is free to leave, and no snapshot was written before it.
  EXPECT_TRUE(reply.poll(io.wait_scope()));
  EXPECT_EQ(reopened.store->snapshot_seq(), 0u) << "the first commit wrote a snapshot first";
  EXPECT_EQ(durable.compaction().stats().snapshots, 0u);
  const uint64_t started_at = reopened.store->last_seq();
  ASSERT_TRUE(testing::WaitUntil([&]() { return durable.compaction().stats().snapshots == 1; },
                                 testing::LoopPasses(loop_.get()), kSnapshotDeadline));
  EXPECT_EQ(reopened.store->snapshot_seq(), started_at);
}

TEST_F(BackgroundSnapshotTest, AFailedTaskLosesNothingIsCountedAndRetried) {
  const uint64_t seed = testing::TestSeed();
  UpdateGenerator generator(seed);
  uint64_t live_digest = 0;
  std::vector<SnapshotOutcome> outcomes;
  {
    Opened live = Open(loop_.get(), dir_.path(),
                       {.snapshot_every = 500,
                        .snapshot_retry_ms = 0,
                        .snapshot_observer = [&](const SnapshotOutcome& o) { outcomes.push_back(o); }});
    DurableState& durable = *live.durable;
    durable.compaction().set_snapshot_fault_for_testing(SnapshotFault::kFailBeforeWriting);
    while (live.store->last_seq() < 500) Pass(durable, generator, 50);
    ASSERT_TRUE(testing::WaitUntil([&]() { return durable.compaction().stats().snapshot_failures == 1; },
                                   testing::LoopPasses(loop_.get()), kSnapshotDeadline));
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_FALSE(outcomes[0].status.ok());
    EXPECT_NE(outcomes[0].status.message().find("injected fault before writing"), std::string::npos)
        << outcomes[0].status.ToString();
    EXPECT_EQ(live.store->snapshot_seq(), 0u);
    EXPECT_TRUE(SnapshotFiles(dir_.path()).empty());
    // The next commit tries again, and this time it works.
    durable.compaction().set_snapshot_fault_for_testing(SnapshotFault::kNone);
    Pass(durable, generator, 10);
    EXPECT_TRUE(durable.compaction().snapshot_in_flight());
    ASSERT_TRUE(testing::WaitUntil([&]() { return durable.compaction().stats().snapshots == 1; },
                                   testing::LoopPasses(loop_.get()), kSnapshotDeadline));
    EXPECT_GT(live.store->snapshot_seq(), 500u);
    live_digest = durable.state().Digest();
  }
  Opened replayed = Open(loop_.get(), dir_.path(), {.snapshot_every = 0});
  EXPECT_EQ(replayed.durable->state().Digest(), live_digest);
}

TEST_F(BackgroundSnapshotTest, ATaskFailingAfterWritingItsFileRecordsNothingAndRemovesIt) {
  const uint64_t seed = testing::TestSeed();
  UpdateGenerator generator(seed);
  uint64_t live_digest = 0, last = 0;
  {
    Opened live = Open(loop_.get(), dir_.path(), {.snapshot_every = 500, .snapshot_retry_ms = 60000});
    DurableState& durable = *live.durable;
    durable.compaction().set_snapshot_fault_for_testing(SnapshotFault::kFailAfterWriting);
    while (live.store->last_seq() < 500) Pass(durable, generator, 50);
    ASSERT_TRUE(testing::WaitUntil([&]() { return durable.compaction().stats().snapshot_failures == 1; },
                                   testing::LoopPasses(loop_.get()), kSnapshotDeadline));
    EXPECT_EQ(live.store->snapshot_seq(), 0u) << "a snapshot whose task failed was recorded";
    // The complete file the task wrote is nobody's: it goes.
    ASSERT_TRUE(testing::WaitUntil([&]() { return SnapshotFiles(dir_.path()).empty(); },
                                   testing::LoopPasses(loop_.get()), kSnapshotDeadline));
    live_digest = durable.state().Digest();
    last = live.store->last_seq();
  }
  Opened replayed = Open(loop_.get(), dir_.path(), {.snapshot_every = 0});
  EXPECT_EQ(replayed.durable->recovery().replayed, last);
  EXPECT_EQ(replayed.durable->state().Digest(), live_digest);
}

TEST_F(BackgroundSnapshotTest, ASnapshotOverTheSizeLimitIsRefusedCountedAndChangesNothing) {
  const uint64_t seed = testing::TestSeed();
  UpdateGenerator generator(seed);
  std::vector<SnapshotOutcome> outcomes;
  Opened live = Open(loop_.get(), dir_.path(),
                     {.snapshot_every = 500,
                      .snapshot_observer = [&](const SnapshotOutcome& o) { outcomes.push_back(o); }},
                     /*max_snapshot_bytes=*/1000);
  DurableState& durable = *live.durable;
  while (live.store->last_seq() < 500) Pass(durable, generator, 50);
  ASSERT_TRUE(testing::WaitUntil([&]() { return durable.compaction().stats().snapshot_failures == 1; },
                                 testing::LoopPasses(loop_.get()), kSnapshotDeadline));
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(outcomes[0].status.message().find("over the limit of 1000"), std::string::npos)
      << outcomes[0].status.ToString();
  EXPECT_EQ(live.store->snapshot_seq(), 0u);
  EXPECT_FALSE(durable.pipeline().failed());
  EXPECT_TRUE(SnapshotFiles(dir_.path()).empty());
  Pass(durable, generator, 10);  // the dispatcher goes on
}

TEST_F(BackgroundSnapshotTest, AnInlineSnapshotMakesTheTaskInFlightStale) {
  const uint64_t seed = testing::TestSeed();
  UpdateGenerator generator(seed);
  uint64_t live_digest = 0, last = 0;
  std::vector<SnapshotOutcome> outcomes;
  {
    Opened live = Open(loop_.get(), dir_.path(),
                       {.snapshot_every = 500,
                        .snapshot_observer = [&](const SnapshotOutcome& o) { outcomes.push_back(o); }});
    DurableState& durable = *live.durable;
    while (live.store->last_seq() < 500) Pass(durable, generator, 50);
    Pass(durable, generator, 7);
    ASSERT_TRUE(durable.compaction().snapshot_in_flight());
    // Clean shutdown writes its own snapshot of everything.
    ASSERT_TRUE(durable.compaction().Snapshot().ok());
    last = live.store->last_seq();
    EXPECT_EQ(live.store->snapshot_seq(), last);
    ASSERT_TRUE(testing::WaitUntil([&]() { return !durable.compaction().snapshot_in_flight(); },
                                   testing::LoopPasses(loop_.get()), kSnapshotDeadline));
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_LT(outcomes[0].info.seq, last);
    EXPECT_EQ(live.store->snapshot_seq(), last) << "the older snapshot replaced the newer one";
    live_digest = durable.state().Digest();
    ASSERT_TRUE(testing::WaitUntil([&]() { return SnapshotFiles(dir_.path()).size() == 1; },
                                   testing::LoopPasses(loop_.get()), kSnapshotDeadline))
        << "the stale file was not removed";
  }
  Opened replayed = Open(loop_.get(), dir_.path(), {.snapshot_every = 0});
  EXPECT_EQ(replayed.durable->recovery().replayed, 0u);
  EXPECT_EQ(replayed.durable->state().Digest(), live_digest);
}

// The shutdown step: once StopBackgroundWork() resolves, nothing of ours is
// on the thread pool (the task in flight was cancelled and came back), and
// later commits start nothing there, so the Store may close under them.
TEST_F(BackgroundSnapshotTest, StoppingBackgroundWorkCancelsTheTaskAndStartsNoMore) {
  UpdateGenerator generator(testing::TestSeed());
  std::vector<SnapshotOutcome> outcomes;
  {
    uvkj::UvAsyncIo io(loop_.get());
    Opened live = Open(loop_.get(), dir_.path(),
                       {.snapshot_every = 500,
                        .snapshot_retry_ms = 0,  // nothing but the stop holds the next one back
                        .snapshot_observer = [&](const SnapshotOutcome& o) { outcomes.push_back(o); }});
    DurableState& durable = *live.durable;
    while (live.store->last_seq() < 500) Pass(durable, generator, 50);
    ASSERT_TRUE(durable.compaction().snapshot_in_flight());
    bool stopped = false;
    auto stop = durable.StopBackgroundWork().then([&]() { stopped = true; }).eagerlyEvaluate(nullptr);
    ASSERT_TRUE(testing::WaitUntil([&]() { return stopped; }, testing::LoopPasses(loop_.get()),
                                   kSnapshotDeadline));
    EXPECT_FALSE(durable.compaction().snapshot_in_flight());
    EXPECT_FALSE(durable.compaction().checkpoint_in_flight());
    EXPECT_EQ(outcomes.size(), 1u) << "the cancelled task did not report";
    // Commits go on (two snapshot intervals' worth) and start nothing.
    for (int i = 0; i < 20; ++i) {
      Pass(durable, generator, 50);
      EXPECT_FALSE(durable.compaction().snapshot_in_flight());
      EXPECT_FALSE(durable.compaction().checkpoint_in_flight());
    }
    EXPECT_EQ(outcomes.size(), 1u);
  }
  EXPECT_EQ(loop_.Close(), 0);
}

// Destroying the owner does not wait for its task: the task is given up
// (told to stop, and freed when libuv hands it back, calling nobody), and the
// loop's owner still closes the loop with nothing left in it.
TEST(BackgroundSnapshotOwner, DestroyingTheStateWithATaskInFlightGivesItUpWithoutWaiting) {
  UpdateGenerator generator(testing::TestSeed());
  testing::TempDir dir;
  int observed = 0;
  uint64_t live_digest = 0;
  {
    uvkj::UvLoop loop;
    {
      Opened live = Open(loop.get(), dir.path(),
                         {.snapshot_every = 500,
                          .snapshot_observer = [&](const SnapshotOutcome&) { ++observed; }});
      while (live.store->last_seq() < 500) Pass(*live.durable, generator, 50);
      ASSERT_TRUE(live.durable->compaction().snapshot_in_flight());
      live_digest = live.durable->state().Digest();
    }  // no loop runs in here: a destructor that waited would have to run it
    EXPECT_EQ(loop.Close(), 0);
  }
  EXPECT_EQ(observed, 0) << "the task called back an owner that was gone";
  // Nothing acknowledged is lost.
  uvkj::UvLoop loop;
  {
    Opened reopened = Open(loop.get(), dir.path(), {.snapshot_every = 0});
    EXPECT_EQ(reopened.durable->state().Digest(), live_digest);
  }
  EXPECT_EQ(loop.Close(), 0);
}

// kill -9 at random moments of a process that journals and snapshots all the
// time (every 300 records, truncating 64 records per commit): a kill lands
// before, during and after snapshot tasks, records and truncation slices. After
// each, start-up must give exactly the digest the process reported for that
// record, and leave only the recorded snapshot file.
TEST(BackgroundSnapshotKill, KillNineDuringSnapshotsRestartsToTheAcknowledgedDigest) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  testing::TempDir dir;
  std::map<uint64_t, uint64_t> digest_at;  // last_seq -> digest reported after that commit
  int checked = 0, in_flight_kills = 0, recorded = 0;
  constexpr int kRounds = 16;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    testing::Subprocess helper({SNAPSHOT_KILL_HELPER_PATH, dir.path(), std::to_string(rng()), "300"});
    const int events = 20 + static_cast<int>(rng() % 400);
    bool in_flight = false;
    for (int i = 0; i < events; ++i) {
      auto line = helper.ReadLine(std::chrono::seconds(60));
      ASSERT_TRUE(line.has_value()) << "helper went quiet after " << i << " events";
      ASSERT_NE(line->rfind("E ", 0), 0u) << *line;
      if (line->rfind("C ", 0) == 0) {
        const size_t space = line->find(' ', 2);
        digest_at[std::stoull(line->substr(2, space - 2))] = std::stoull(line->substr(space + 1));
      } else if (line->rfind("F ", 0) == 0) {
        in_flight = true;
      } else if (line->rfind("S ", 0) == 0) {
        in_flight = false;
        ++recorded;
      } else if (line->rfind("X ", 0) == 0) {
        ADD_FAILURE() << "snapshot failed in the helper: " << *line;
      }
    }
    helper.Signal(SIGKILL);
    auto status = helper.Wait(std::chrono::seconds(30));
    ASSERT_TRUE(status.has_value() && WIFSIGNALED(*status));
    while (auto line = helper.ReadLine(std::chrono::milliseconds(0))) {
      if (line->rfind("C ", 0) == 0) {
        const size_t space = line->find(' ', 2);
        digest_at[std::stoull(line->substr(2, space - 2))] = std::stoull(line->substr(space + 1));
      }
    }
    if (in_flight) ++in_flight_kills;

    uvkj::UvLoop loop;
    {
      Opened reopened = Open(loop.get(), dir.path(), {.snapshot_every = 0});
      ASSERT_NE(reopened.durable, nullptr);
      const uint64_t last = reopened.store->last_seq();
      auto it = digest_at.find(last);
      if (it != digest_at.end()) {
        EXPECT_EQ(reopened.durable->state().Digest(), it->second) << "at record " << last;
        ++checked;
      }
      // Anything after `last` was never committed: forget what was reported
      // about it (the next round builds on `last`).
      digest_at.erase(digest_at.upper_bound(last), digest_at.end());
      EXPECT_LE(SnapshotFiles(dir.path()).size(), 1u);
    }
    loop.Close();
  }
  std::printf("[ info     ] %d kills, %d with a snapshot task in flight, %d snapshots recorded, "
              "%d digests checked\n",
              kRounds, in_flight_kills, recorded, checked);
  EXPECT_GT(recorded, 0);
  EXPECT_GE(checked, kRounds / 2);
}

// Reads a "C <last_seq> <digest>" or "D <last_seq> <digest>" line into `digest_at`.
void NoteDigest(const std::string& line, std::map<uint64_t, uint64_t>& digest_at) {
  if (line.rfind("C ", 0) != 0 && line.rfind("D ", 0) != 0) return;
  const size_t space = line.find(' ', 2);
  digest_at[std::stoull(line.substr(2, space - 2))] = std::stoull(line.substr(space + 1));
}

// Kills `helper` with SIGKILL and reads what it wrote before it died;
// returns true if one of those lines is `marker`.
bool KillAndDrain(testing::Subprocess& helper, std::map<uint64_t, uint64_t>& digest_at,
                  const std::string& marker) {
  helper.Signal(SIGKILL);
  auto status = helper.Wait(std::chrono::seconds(30));
  EXPECT_TRUE(status.has_value() && (WIFSIGNALED(*status) || WIFEXITED(*status)));
  bool seen = false;
  while (auto line = helper.ReadLine(std::chrono::milliseconds(0))) {
    NoteDigest(*line, digest_at);
    if (*line == marker) seen = true;
  }
  return seen;
}

// Restarts on `dir` and checks the state against what was reported for the
// record it ends at; returns whether a digest was there to compare.
bool RestartMatchesReportedDigest(const std::string& dir, std::map<uint64_t, uint64_t>& digest_at) {
  bool checked = false;
  uvkj::UvLoop loop;
  {
    Opened reopened = Open(loop.get(), dir, {.snapshot_every = 0});
    EXPECT_NE(reopened.durable, nullptr);
    if (reopened.durable != nullptr) {
      const uint64_t last = reopened.store->last_seq();
      auto it = digest_at.find(last);
      if (it != digest_at.end()) {
        EXPECT_EQ(reopened.durable->state().Digest(), it->second) << "at record " << last;
        checked = true;
      }
      digest_at.erase(digest_at.upper_bound(last), digest_at.end());
      EXPECT_LE(SnapshotFiles(dir).size(), 1u);
    }
  }
  loop.Close();
  return checked;
}

// kill -9 the moment the shutdown snapshot starts (the dispatcher's last act
// on SIGTERM: commit what is pending, then snapshot on the loop thread): the
// restart gives the digest the process reported just before it.
TEST(BackgroundSnapshotKill, KillNineDuringTheShutdownSnapshotRestartsToTheAcknowledgedDigest) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  testing::TempDir dir;
  std::map<uint64_t, uint64_t> digest_at;
  int checked = 0, before_done = 0;
  constexpr int kRounds = 8;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    testing::Subprocess helper({SNAPSHOT_KILL_HELPER_PATH, dir.path(), std::to_string(rng()), "300",
                                std::to_string(5 + rng() % 80)});
    bool shutting_down = false;
    while (!shutting_down) {
      auto line = helper.ReadLine(std::chrono::seconds(60));
      ASSERT_TRUE(line.has_value()) << "helper went quiet before its shutdown snapshot";
      ASSERT_NE(line->rfind("E ", 0), 0u) << *line;
      NoteDigest(*line, digest_at);
      shutting_down = line->rfind("D ", 0) == 0;
    }
    if (!KillAndDrain(helper, digest_at, "d")) ++before_done;
    if (RestartMatchesReportedDigest(dir.path(), digest_at)) ++checked;
  }
  std::printf("[ info     ] %d kills at the shutdown snapshot, %d before it was written, %d digests checked\n",
              kRounds, before_done, checked);
  EXPECT_EQ(checked, kRounds) << "the shutdown's last commit was reported before the kill";
}

// kill -9 the moment a checkpoint starts on the thread pool (it copies the WAL
// into the database and syncs both): the restart gives a reported digest.
TEST(BackgroundSnapshotKill, KillNineDuringACheckpointRestartsToTheAcknowledgedDigest) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  testing::TempDir dir;
  std::map<uint64_t, uint64_t> digest_at;
  int checked = 0, in_flight = 0;
  constexpr int kRounds = 8;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    testing::Subprocess helper({SNAPSHOT_KILL_HELPER_PATH, dir.path(), std::to_string(rng()), "300"});
    const int warmup = 10 + static_cast<int>(rng() % 200);
    bool checkpointing = false;
    for (int i = 0; !checkpointing; ++i) {
      auto line = helper.ReadLine(std::chrono::seconds(60));
      ASSERT_TRUE(line.has_value()) << "helper went quiet after " << i << " events";
      ASSERT_NE(line->rfind("E ", 0), 0u) << *line;
      NoteDigest(*line, digest_at);
      checkpointing = i >= warmup && *line == "K";
    }
    if (!KillAndDrain(helper, digest_at, "k")) ++in_flight;
    if (RestartMatchesReportedDigest(dir.path(), digest_at)) ++checked;
  }
  std::printf("[ info     ] %d kills as a checkpoint started, %d before it came back, %d digests checked\n",
              kRounds, in_flight, checked);
  EXPECT_GE(checked, kRounds / 2);
}

}  // namespace
}  // namespace dispatch::reactor
