// Formats that last: the work dir and the etcd journal dump committed under
// tests/compat/fixtures/ were written by an earlier build (compat_fixture_gen);
// this build must open and replay each to the digest recorded beside it.
// A change to journal records, snapshots, result files or the HA wire that
// would strand an existing deployment fails here. Each test works on a copy:
// the committed fixture is never opened for writing.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "clients/pattern_bytes.h"
#include "tests/compat/fixture_support.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

// Whether `replayed` is what the fixture's digest file `name` recorded.
void ExpectCommittedState(const std::string& name, const Result<Replayed>& replayed) {
  auto committed = ParseDigestFile(ReadWholeFile(FixtureDir() + "/" + name));
  ASSERT_TRUE(committed.ok()) << name << ": " << committed.status().ToString();
  ASSERT_TRUE(replayed.ok()) << replayed.status().ToString();
  EXPECT_EQ(replayed->applied, committed->applied) << name;
  EXPECT_EQ(replayed->digest, committed->digest)
      << "this build replays the fixture of " << name << " to another state";
}

TEST(Fixtures, TheCommittedWorkDirReplaysToItsDigest) {
  TempDir dir;
  ASSERT_TRUE(CopyDir(FixtureDir() + "/work_dir", dir.File("work")).ok());
  ExpectCommittedState("work_dir.digest", ReplayWorkDir(dir.File("work")));
}

TEST(Fixtures, TheCommittedWorkDirPassesVerify) {
  TempDir dir;
  ASSERT_TRUE(CopyDir(FixtureDir() + "/work_dir", dir.File("work")).ok());
  Subprocess verify({DispatcherBinary(), "--verify", "--work-dir=" + dir.File("work")});
  std::string said;
  while (auto line = verify.ReadLine(60s)) said += *line + "\n";
  auto status = verify.Wait(60s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << said;
}

// The HA group's etcd keys, dumped by an earlier build: put into a fresh
// etcd and read back the way a dispatcher taking over reads them, they must
// replay to the digest recorded beside the dump.
TEST(Fixtures, TheCommittedEtcdJournalReplaysToItsDigest) {
  if (!EtcdCluster::Available()) GTEST_SKIP() << "etcd is not installed";
  auto dump = ParseDump(ReadWholeFile(FixtureDir() + "/etcd_journal.dump"));
  ASSERT_TRUE(dump.ok()) << dump.status().ToString();
  ASSERT_FALSE(dump->empty()) << "the committed dump is empty";
  EtcdCluster etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.error();
  TempDir dir;
  ExpectCommittedState("etcd_journal.digest",
                       ReplayEtcdDump(etcd.endpoints(), *dump, dir.File("store")));
}

// A dispatcher started on the fixture serves what it held: the closures
// fetched but not released, the large one from its result file.
TEST(Fixtures, ADispatcherOnTheCommittedWorkDirServesTheHeldResults) {
  TempDir dir;
  ASSERT_TRUE(CopyDir(FixtureDir() + "/work_dir", dir.File("work")).ok());
  DispatcherProcess dispatcher({.work_dir = dir.File("work")});
  ClientLoop loop;
  auto conn = loop.Connect(dispatcher.address());
  const HeldFixtureResults held = FetchHeldFixtureResults(loop, conn->dispatcher());
  EXPECT_EQ(held.finished, 3u) << "five finished, two released";
  EXPECT_TRUE(held.big.has_value()) << "the result kept in a file was not served";
  if (held.big) {
    EXPECT_EQ(*held.big, clients::PatternBytes(kFixtureBigResultBytes, kFixtureBigResultSeed));
  }
}

}  // namespace
}  // namespace dispatch::testing
