// Online backups (OnlineBackup, issue 49 point 8): a copy taken while
// commits go on between its steps replays to exactly the state after its
// last record; one backup at a time; a target that is not empty is refused
// and kept as it was; a shutdown abandons a copy in progress and removes it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "reactor/durable_state.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "storage/store.h"
#include "tests/reactor/opened_durable.h"
#include "tests/state/update_generator.h"
#include "tests/support/loop_passes.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"
#include "tests/support/wait_until.h"

namespace dispatch::reactor {
namespace {

using state::testing::UpdateGenerator;

Opened Open(uv_loop_t* loop, const std::string& dir, DurableStateOptions options = {}) {
  return OpenDurable(loop, LogicStoreOptions(dir), std::move(options));
}

void Pass(DurableState& durable, UpdateGenerator& generator, int count) {
  for (int i = 0; i < count; ++i) {
    ASSERT_TRUE(durable.pipeline().Submit(generator.Next(durable.state()).reader()).ok());
  }
  durable.EndOfPass();
  ASSERT_FALSE(durable.pipeline().failed());
}

// The options of a backup that takes one page per KJ turn: even a small
// journal then takes hundreds of turns, with commits between them.
DurableStateOptions OnePagePerStep() {
  DurableStateOptions options;
  options.snapshot_every = 0;
  options.backup.pages_per_step = 1;
  return options;
}

class OnlineBackupTest : public ::testing::Test {
 protected:
  uvkj::UvLoop loop_;
  testing::TempDir dir_;
  std::string work() const { return dir_.File("work"); }
  std::string target() const { return dir_.File("backup"); }
};

TEST_F(OnlineBackupTest, ACopyTakenWhileCommitsGoOnReplaysToTheStateOfItsLastRecord) {
  uvkj::UvAsyncIo io_(loop_.get());
  UpdateGenerator generator(testing::TestSeed());
  std::map<uint64_t, uint64_t> digest_at;  // last record -> the state's digest then
  BackupOutcome outcome;
  uint64_t written_during = 0;
  {
    // Two pages a turn against one small update a turn: the copy outpaces
    // the journal's growth, as it must to end.
    DurableStateOptions options = OnePagePerStep();
    options.backup.pages_per_step = 2;
    Opened live = Open(loop_.get(), work(), options);
    DurableState& durable = *live.durable;
    while (live.store->last_seq() < 2000) Pass(durable, generator, 50);
    io_.port().SetPassEndHook([&]() {
      durable.EndOfPass();
      if (!durable.pipeline().pending()) digest_at[live.store->last_seq()] = durable.state().Digest();
    });
    digest_at[live.store->last_seq()] = durable.state().Digest();
    const uint64_t before = live.store->last_seq();
    // A writer: an update every KJ turn for as long as the copy runs.
    bool copying = true;
    std::function<kj::Promise<void>()> write = [&]() -> kj::Promise<void> {
      if (!copying) return kj::READY_NOW;
      EXPECT_TRUE(durable.pipeline().Submit(generator.Next(durable.state()).reader()).ok());
      return kj::evalLater([&]() { return write(); });
    };
    kj::Promise<void> writer = write().eagerlyEvaluate(nullptr);
    // Turned as the dispatcher turns its loop (a top-level wait() would run
    // the writer's turns alone, never libuv's).
    Result<BackupOutcome> result = InternalError("not done");
    kj::Promise<void> backup = durable.Backup(target())
                                   .then([&](Result<BackupOutcome> r) {
                                     copying = false;
                                     result = std::move(r);
                                   })
                                   .eagerlyEvaluate(nullptr);
    ASSERT_TRUE(testing::WaitUntil([&]() { return !copying; }, testing::LoopPasses(io_),
                                   std::chrono::seconds(120)));
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    outcome = *result;
    written_during = outcome.last_seq - before;
    EXPECT_GT(outcome.steps, 20u) << "the copy was not spread over turns";
    EXPECT_GT(written_during, 0u) << "nothing committed while the copy ran";
    // Commits go on after it; the copy stays as it was.
    Pass(durable, generator, 50);
    io_.port().SetPassEndHook(nullptr);
  }
  ASSERT_EQ(digest_at.count(outcome.last_seq), 1u) << "the copy ends between two commits";
  EXPECT_TRUE(std::filesystem::exists(target() + "/COMMITTED"));
  EXPECT_FALSE(std::filesystem::exists(target() + "/" + storage::kPartialDatabaseName));
  Opened restored = Open(loop_.get(), target(), {.snapshot_every = 0});
  ASSERT_NE(restored.durable, nullptr);
  EXPECT_EQ(restored.store->last_seq(), outcome.last_seq);
  EXPECT_EQ(restored.durable->state().Digest(), digest_at[outcome.last_seq])
      << "the copy replays to another state than the live one had at record " << outcome.last_seq
      << " (" << written_during << " records were committed while it ran)";
}

TEST_F(OnlineBackupTest, ASecondBackupIsRefusedWhileOneRunsAndTheFirstCompletes) {
  uvkj::UvAsyncIo io_(loop_.get());
  UpdateGenerator generator(testing::TestSeed());
  Opened live = Open(loop_.get(), work(), OnePagePerStep());
  while (live.store->last_seq() < 500) Pass(*live.durable, generator, 50);
  auto first = live.durable->Backup(target());
  auto second = live.durable->Backup(dir_.File("other")).wait(io_.wait_scope());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << second.status().ToString();
  EXPECT_NE(second.status().message().find("is running"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_.File("other"))) << "the refused backup wrote";
  auto done = first.wait(io_.wait_scope());
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->last_seq, live.store->last_seq());
  // Once it is done, the next one runs.
  auto third = live.durable->Backup(dir_.File("other")).wait(io_.wait_scope());
  EXPECT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(live.durable->backup().stats().completed, 2u);
}

TEST_F(OnlineBackupTest, ATargetThatIsNotEmptyIsRefusedAndKeptAsItWas) {
  uvkj::UvAsyncIo io_(loop_.get());
  UpdateGenerator generator(testing::TestSeed());
  Opened live = Open(loop_.get(), work());
  Pass(*live.durable, generator, 50);
  std::filesystem::create_directories(target());
  { std::ofstream(target() + "/notes.txt") << "mine"; }
  auto refused = live.durable->Backup(target()).wait(io_.wait_scope());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("not empty"), std::string::npos)
      << refused.status().ToString();
  size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(target())) ++entries;
  EXPECT_EQ(entries, 1u);
  // Refused at once, before any file work: relative paths and the work dir.
  for (const std::string& bad : {std::string("relative/dir"), work(), work() + "/inside"}) {
    auto at_once = live.durable->Backup(bad).wait(io_.wait_scope());
    ASSERT_FALSE(at_once.ok()) << bad;
    EXPECT_EQ(at_once.status().code(), bad[0] == '/' ? StatusCode::kFailedPrecondition
                                                     : StatusCode::kInvalidArgument)
        << at_once.status().ToString();
  }
  EXPECT_FALSE(std::filesystem::exists(work() + "/inside"));
  EXPECT_EQ(live.durable->backup().stats().completed, 0u);
}

TEST_F(OnlineBackupTest, ShutdownAbandonsACopyInProgressAndRemovesIt) {
  uvkj::UvAsyncIo io_(loop_.get());
  UpdateGenerator generator(testing::TestSeed());
  // Steps of no page: a copy that never ends by itself.
  DurableStateOptions options;
  options.backup.pages_per_step = 0;
  Opened live = Open(loop_.get(), work(), options);
  Pass(*live.durable, generator, 50);
  bool ended = false;
  Status status;
  kj::Promise<void> backup = live.durable->Backup(target())
                                 .then([&](Result<BackupOutcome> r) {
                                   status = r.status();
                                   ended = true;
                                 })
                                 .eagerlyEvaluate(nullptr);
  const std::string partial = target() + "/" + storage::kPartialDatabaseName;
  ASSERT_TRUE(testing::WaitUntil([&]() { return std::filesystem::exists(partial); },
                                 testing::LoopPasses(io_)));
  live.durable->StopBackgroundWork().wait(io_.wait_scope());
  ASSERT_TRUE(testing::WaitUntil([&]() { return ended; }, testing::LoopPasses(io_)));
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
  EXPECT_FALSE(std::filesystem::exists(target())) << "the abandoned copy was left behind";
  EXPECT_EQ(live.durable->backup().stats().failed, 1u);
  auto after = live.durable->Backup(dir_.File("later")).wait(io_.wait_scope());
  EXPECT_EQ(after.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dispatch::reactor
