// LeaderElection across real processes (election_helper) on a real etcd:
// a standby takes over after kill -9 of the holder; a holder stopped past its
// lease loses leadership when it runs again and never claims it; a revoked
// lease ends leadership through the keepalive's missing TTL; a candidate
// not ready to lead (a loading standby) campaigns only once it is. Gaps are
// printed, never asserted.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/support/etcd_cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {
namespace {

constexpr const char* kKey = "p/leader";

class LeaderElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Available()) {
      GTEST_SKIP() << "etcd is not installed (Debian etcd-server; scripts/bootstrap.sh installs it)";
    }
    ASSERT_TRUE(cluster_.Start()) << cluster_.error();
  }

  std::unique_ptr<Subprocess> Candidate(const std::string& name, const std::string& request_timeout_ms = "5000") {
    return std::make_unique<Subprocess>(std::vector<std::string>{ELECTION_HELPER, cluster_.EndpointList(), kKey,
                                                                 name, "2", request_timeout_ms});
  }

  // A candidate whose campaigns wait until `ready_file` exists.
  std::unique_ptr<Subprocess> GatedCandidate(const std::string& name, const std::string& ready_file) {
    setenv("ELECTION_HELPER_READY_FILE", ready_file.c_str(), 1);
    auto candidate = Candidate(name);
    unsetenv("ELECTION_HELPER_READY_FILE");
    return candidate;
  }

  // A candidate that says its lease ("granted HEX") and whose campaigns wait
  // until `ready_file` exists.
  std::unique_ptr<Subprocess> GatedCandidateSayingItsLease(const std::string& name,
                                                           const std::string& ready_file) {
    setenv("ELECTION_HELPER_SAY_LEASE", "1", 1);
    auto candidate = GatedCandidate(name, ready_file);
    unsetenv("ELECTION_HELPER_SAY_LEASE");
    return candidate;
  }

  // The candidate's next line, or "" at the deadline.
  static std::string Next(Subprocess& p) { return p.ReadLine(kTestDeadline).value_or(""); }

  // "leader 7 lease 3f..." -> 7
  static long long Revision(const std::string& line) { return std::stoll(line.substr(7)); }

  EtcdCluster cluster_;
};

TEST_F(LeaderElectionTest, AStandbyTakesOverAfterKillOfTheHolder) {
  auto a = Candidate("a");
  const std::string a_line = Next(*a);
  ASSERT_EQ(a_line.rfind("leader ", 0), 0u) << a_line;
  auto b = Candidate("b");
  EXPECT_EQ(Next(*b), "following a");

  const auto killed = std::chrono::steady_clock::now();
  a->Signal(SIGKILL);
  ASSERT_TRUE(a->Wait(kTestDeadline).has_value());
  const std::string b_line = Next(*b);
  ASSERT_EQ(b_line.rfind("leader ", 0), 0u) << b_line;
  // The new leader's fencing token is newer than the dead one's.
  EXPECT_GT(Revision(b_line), Revision(a_line));
  std::printf("kill -9 of the holder -> standby leads after %lld ms (lease TTL 2 s)\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - killed)
                                         .count()));
}

TEST_F(LeaderElectionTest, AHolderStoppedPastItsLeaseStepsDownWhenItRunsAgain) {
  auto a = Candidate("a");
  ASSERT_EQ(Next(*a).rfind("leader ", 0), 0u);
  auto b = Candidate("b");
  ASSERT_EQ(Next(*b), "following a");
  a->Signal(SIGSTOP);
  const std::string b_line = Next(*b);
  ASSERT_EQ(b_line.rfind("leader ", 0), 0u) << b_line;
  a->Signal(SIGCONT);
  const std::string a_end = Next(*a);
  EXPECT_EQ(a_end.rfind("lost ", 0), 0u) << a_end;
  auto status = a->Wait(kTestDeadline);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3) << *status;
}

TEST_F(LeaderElectionTest, ARevokedLeaseEndsLeadershipThroughTheKeepAlive) {
  auto a = Candidate("a");
  const std::string a_line = Next(*a);
  ASSERT_EQ(a_line.rfind("leader ", 0), 0u) << a_line;
  const std::string lease = a_line.substr(a_line.find(" lease ") + 7);
  Subprocess revoke({"/usr/bin/etcdctl", "--endpoints=" + cluster_.EndpointList(), "lease", "revoke", lease});
  auto revoked = revoke.Wait(kTestDeadline);
  ASSERT_TRUE(revoked.has_value() && WIFEXITED(*revoked) && WEXITSTATUS(*revoked) == 0);
  const std::string a_end = Next(*a);
  // A leader that never followed has no watch: its keepalive's missing TTL tells it.
  EXPECT_NE(a_end.find("is gone: etcd's keepalive answer has no TTL"), std::string::npos) << a_end;
}

// etcd stops answering (SIGSTOP of its only member): the holder's keepalive
// never returns, and the holder must still give up within its budget, on
// its own clock. Its client waits a minute for an answer, longer than this
// test's deadline, so only the holder's own deadline can end it in time.
TEST_F(LeaderElectionTest, AHolderStepsDownWhileEtcdDoesNotAnswer) {
  auto a = Candidate("a", "60000");
  ASSERT_EQ(Next(*a).rfind("leader ", 0), 0u);
  cluster_.Signal(0, SIGSTOP);
  const std::string a_end = Next(*a);
  cluster_.Signal(0, SIGCONT);
  EXPECT_EQ(a_end.rfind("lost Unavailable: no keepalive of lease", 0), 0u) << a_end;
}

TEST_F(LeaderElectionTest, ACandidateNotReadyToLeadCampaignsOnlyOnceItIs) {
  TempDir dir;
  const std::string ready = dir.File("ready");
  auto a = Candidate("a");
  ASSERT_EQ(Next(*a).rfind("leader ", 0), 0u);
  // Every campaign waits for readiness, the first one (which only finds
  // that a leads) too.
  auto b = GatedCandidate("b", ready);
  EXPECT_EQ(Next(*b), "holding back");
  { std::ofstream(ready).put('1'); }
  EXPECT_EQ(Next(*b), "following a");
  std::remove(ready.c_str());
  // The holder dies: the key goes with its lease, and b, not ready any
  // more, waits instead of leading.
  a->Signal(SIGKILL);
  ASSERT_TRUE(a->Wait(kTestDeadline).has_value());
  EXPECT_EQ(Next(*b), "holding back");
  { std::ofstream(ready).put('1'); }
  const std::string led = Next(*b);
  EXPECT_EQ(led.rfind("leader ", 0), 0u) << led;
}

// A campaign whose transaction committed but whose answer was lost (the
// request timed out under load) campaigns again and reads the key back: it
// holds the candidate's own lease. Following that key would follow itself
// for ever, since its own keepalives keep the key; it must lead. The lost
// answer is staged: the test puts the key with the candidate's lease while
// the candidate holds its campaign back.
TEST_F(LeaderElectionTest, ACampaignThatFindsItsOwnLeaseOnTheKeyLeads) {
  TempDir dir;
  const std::string ready = dir.File("ready");
  auto a = GatedCandidateSayingItsLease("a", ready);
  const std::string granted = Next(*a);
  ASSERT_EQ(granted.rfind("granted ", 0), 0u) << granted;
  const std::string lease = granted.substr(8);
  ASSERT_EQ(Next(*a), "holding back");
  Subprocess put({"/usr/bin/etcdctl", "--endpoints=" + cluster_.EndpointList(), "put", kKey, "a",
                  "--lease=" + lease});
  auto put_status = put.Wait(kTestDeadline);
  ASSERT_TRUE(put_status.has_value() && WIFEXITED(*put_status) && WEXITSTATUS(*put_status) == 0);
  { std::ofstream(ready).put('1'); }
  const std::string led = Next(*a);
  EXPECT_EQ(led.rfind("leader ", 0), 0u) << led;
  EXPECT_EQ(led.substr(led.find(" lease ") + 7), lease) << led;
}

}  // namespace
}  // namespace dispatch::testing
