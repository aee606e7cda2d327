// HA mode (--etcd) with real processes: a real etcd (tests/support/etcd_cluster.h),
// real dispatchers (DispatcherProcess), dispatch-worker and dispatchctl.
//  - the leader journals registrations, jobs and closures in etcd; after
//    kill -9 of the leader the standby serves with every acknowledged change;
//  - a standby refuses every call naming the leader, and /readyz says so;
//    a client given only the standby follows it to the leader;
//  - a leader stopped past its lease (SIGSTOP) and resumed acknowledges
//    nothing more: its write is never journaled, and it rejoins as a standby
//    (or, with --rejoin=false, exits with code 5 once fenced);
//  - a clean stop revokes the lease; `dispatchctl group` shows the group.
// Takeover gaps are printed, never asserted.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "clients/blocking_dataset_client.h"
#include "common/rpc_status.h"
#include "tests/closures/closure_test_support.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {
namespace {

constexpr int kExitLeadershipLost = 5;  // reactor/durable_state.h
constexpr char kLateDefinition[] = "range count=3 late";

class HaDispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Available()) {
      GTEST_SKIP() << "etcd is not installed (Debian etcd-server; scripts/bootstrap.sh installs it)";
    }
    ASSERT_TRUE(cluster_.Start()) << cluster_.error();
  }

  // A failed test shows what each dispatcher logged.
  void TearDown() override {
    if (!HasFailure()) return;
    for (const char* name : {"a", "b", "c"}) {
      std::ifstream log(dir_.File(std::string(name) + ".log"));
      if (!log) continue;
      const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      printf("---- %s.log ----\n%s", name, text.c_str());
    }
  }

  std::unique_ptr<DispatcherProcess> StartDispatcher(const std::string& name,
                                                     std::vector<std::string> flags = {}) {
    DispatcherProcess::Options options;
    options.work_dir = dir_.File(name);
    options.stderr_path = dir_.File(name + ".log");
    options.extra_flags = {"--etcd=" + cluster_.EndpointList(), "--ha-prefix=/test/ha",
                           "--lease-ttl-ms=2000", "--worker-heartbeat-interval-ms=100"};
    for (std::string& flag : flags) options.extra_flags.push_back(std::move(flag));
    return std::make_unique<DispatcherProcess>(options);
  }

  // Non-empty lines of etcdctl's output (a key per line with --keys-only).
  static size_t CountLines(const std::string& text) {
    size_t n = 0, start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      if (end > start) ++n;
      start = end + 1;
    }
    return n;
  }

  // "STATUS BODY" of /readyz, or "unreachable: WHY" while nothing listens
  // (a member between leaving and rejoining).
  static std::string Ready(DispatcherProcess& d) {
    try {
      HttpResponse r = HttpGet(d.http_url(), "/readyz", "", std::chrono::seconds(5));
      return std::to_string(r.status) + " " + r.body;
    } catch (const std::exception& e) {
      return std::string("unreachable: ") + e.what();
    }
  }

  static bool WaitLeading(DispatcherProcess& d) {
    return WaitUntil([&] { return Ready(d).rfind("200 ", 0) == 0; });
  }

  std::string Etcdctl(std::vector<std::string> args) { return cluster_.Etcdctl(std::move(args)); }

  TempDir dir_;
  EtcdCluster cluster_;
};

TEST_F(HaDispatcherTest, AStandbyServesEveryAcknowledgedChangeAfterKillOfTheLeader) {
  auto a = StartDispatcher("a");
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto b = StartDispatcher("b");
  ASSERT_TRUE(WaitUntil([&] { return Ready(*b).find("standby of " + a->address()) != std::string::npos; }))
      << Ready(*b);

  auto worker = StartClosureWorker(a->address(), 2);
  // A dataset and a DYNAMIC job read to its end, acknowledged only after
  // their etcd transactions.
  CommandResult read = RunDispatchctl({"--dispatcher=" + a->address(), "read", "--mode=dynamic",
                                       "range", "count=200", "splits=8"});
  ASSERT_EQ(read.exit_code, 0) << read.output;
  // Closures run, their results held (not fetched): the coordinator learned
  // each outcome only after the commit that recorded it.
  auto coordinator = MakeCoordinator(a->address());
  std::vector<clients::RemoteValue> values;
  for (int i = 0; i < 25; ++i) {
    auto value = coordinator->Schedule("echo", "result " + std::to_string(i));
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    values.push_back(*value);
  }
  ASSERT_TRUE(WaitUntil([&] {
    for (auto& v : values) {
      if (v.status() != clients::RemoteValueStatus::kReady) return false;
    }
    return true;
  })) << "not every closure finished";
  worker->Kill9();
  CommandResult datasets_before = RunDispatchctl({"--dispatcher=" + a->address(), "datasets"});
  ASSERT_EQ(datasets_before.exit_code, 0) << datasets_before.output;
  CommandResult jobs_before = RunDispatchctl({"--dispatcher=" + a->address(), "jobs"});
  ASSERT_EQ(jobs_before.exit_code, 0) << jobs_before.output;
  const ClosureCounters closures_before = GetClosureCounters(a->address());
  ASSERT_EQ(closures_before.finished, 25u);

  const auto killed = std::chrono::steady_clock::now();
  a->process().Signal(SIGKILL);
  ASSERT_TRUE(a->process().Wait(kTestDeadline).has_value());
  ASSERT_TRUE(WaitLeading(*b)) << Ready(*b);
  printf("standby served %lld ms after kill -9 of the leader\n",
         static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now() - killed)
                                    .count()));

  CommandResult datasets_after = RunDispatchctl({"--dispatcher=" + b->address(), "datasets"});
  EXPECT_EQ(datasets_after.exit_code, 0) << datasets_after.output;
  EXPECT_EQ(datasets_after.output, datasets_before.output);
  CommandResult jobs_after = RunDispatchctl({"--dispatcher=" + b->address(), "jobs"});
  EXPECT_EQ(jobs_after.exit_code, 0) << jobs_after.output;
  EXPECT_EQ(jobs_after.output, jobs_before.output);
  const ClosureCounters closures_after = GetClosureCounters(b->address());
  EXPECT_EQ(closures_after.finished, closures_before.finished);
  EXPECT_EQ(closures_after.queued + closures_after.assigned + closures_after.failed, 0u);
  // Ids go on where the old leader stopped: the new leader's next dataset
  // is a new one, and it serves writes.
  auto second_worker = StartClosureWorker(b->address(), 1);
  CommandResult run = RunDispatchctl({"--dispatcher=" + b->address(), "run", "--count=3", "echo", "again"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST_F(HaDispatcherTest, AStandbyRefusesEveryCallNamingTheLeader) {
  auto a = StartDispatcher("a");
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto b = StartDispatcher("b");
  ASSERT_TRUE(WaitUntil([&] { return Ready(*b).find("standby of " + a->address()) != std::string::npos; }))
      << Ready(*b);
  EXPECT_EQ(Ready(*b), "503 standby of " + a->address() + "\n");
  EXPECT_EQ(HttpGet(b->http_url(), "/healthz").status, 200);
  // One address, no following: the gateway's refusal as it is on the wire.
  ClientLoop loop;
  kj::Maybe<kj::Exception> refused = kj::runCatchingExceptions(
      [&] { loop.Wait(clients::DispatcherConnection::ConnectOne(loop.io().network(), b->address(), "")); });
  KJ_IF_MAYBE (e, refused) {
    EXPECT_EQ(StatusFromException(*e).ToString(), "Unavailable: not the leader; the leader is " + a->address());
  } else {
    ADD_FAILURE() << "the standby accepted a connection";
  }
  // Every client follows that refusal to the leader (issue 20, Clients).
  CommandResult followed = RunDispatchctl({"--dispatcher=" + b->address(), "datasets"});
  EXPECT_EQ(followed.exit_code, 0) << followed.output;
  CommandResult served = RunDispatchctl({"--dispatcher=" + a->address(), "datasets"});
  EXPECT_EQ(served.exit_code, 0) << served.output;
}

TEST_F(HaDispatcherTest, MetricsTellTheLeaderFromAHotStandbyAndHowFarTheStandbyFollows) {
  auto a = StartDispatcher("a");
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto b = StartDispatcher("b");
  std::string metrics;
  ASSERT_TRUE(WaitUntil([&] {
    metrics = HttpGet(b->http_url(), "/metrics").body;
    return MetricSample(metrics, "dispatch_ha_standby_following") == 1;
  })) << metrics;
  EXPECT_EQ(MetricSample(metrics, "dispatch_ha_leading"), 0);
  EXPECT_EQ(MetricSample(metrics, "dispatch_ha_standby_live_state"), 1);
  EXPECT_EQ(MetricSample(metrics, "dispatch_ha_lease_ttl_seconds"), 2);
  EXPECT_GE(MetricSample(metrics, "dispatch_ha_campaigns_total"), 1);
  const std::string leader = HttpGet(a->http_url(), "/metrics").body;
  EXPECT_EQ(MetricSample(leader, "dispatch_ha_leading"), 1);
  EXPECT_EQ(MetricSample(leader, "dispatch_ha_standby_following"), 0);
  // What the leader journals, the standby's position shows.
  clients::DispatcherEndpoint endpoint;
  endpoint.address = a->address();
  auto registered = clients::RegisterDatasetAndWait(endpoint, DatasetOf("range count=7"));
  ASSERT_TRUE(registered.ok()) << registered.status().ToString();
  double leader_seq = MetricSample(HttpGet(a->http_url(), "/metrics").body, "dispatch_journal_records_total");
  ASSERT_GE(leader_seq, 1);
  EXPECT_TRUE(WaitUntil([&] {
    return MetricSample(HttpGet(b->http_url(), "/metrics").body, "dispatch_ha_standby_seq") >= leader_seq;
  })) << HttpGet(b->http_url(), "/metrics").body;
  // Single node has none of them.
  DispatcherProcess single(DispatcherProcess::Options{});
  EXPECT_EQ(MetricSample(HttpGet(single.http_url(), "/metrics").body, "dispatch_ha_leading"), -1);
}

TEST_F(HaDispatcherTest, ALeaderStoppedPastItsLeaseAcknowledgesNothingMoreAndRejoinsAsAStandby) {
  auto a = StartDispatcher("a");
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto b = StartDispatcher("b");
  ASSERT_TRUE(WaitUntil([&] { return Ready(*b).find("standby of") != std::string::npos; })) << Ready(*b);
  // No worker: closures stay queued, each schedule acknowledged once journaled.
  auto coordinator = MakeCoordinator(a->address());
  auto first = coordinator->Schedule("echo", "first");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(WaitUntil([&] { return first->closure_id() != 0; })) << "the first schedule was not acknowledged";

  // A write on a connection of its own, which never goes anywhere else: it
  // waits in the socket while A is stopped, and A must not acknowledge it.
  // Its own thread, since each thread has at most one event loop.
  std::atomic<bool> connected{false}, stopped{false}, sent{false}, done{false};
  std::string outcome;
  std::thread writer([&] {
    ClientLoop loop;
    auto connection = loop.Connect(a->address());
    connected = true;
    WaitUntil([&] { return stopped.load(); }, loop);
    auto late = connection->dispatcher().getOrRegisterDatasetRequest();
    late.setDefinition(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(kLateDefinition),
                                           strlen(kLateDefinition)));
    auto reply = late.send();
    // The loop's pending work (the write to the socket) runs now, long
    // before B can lead (a lease's time from now).
    loop.wait_scope().poll();
    sent = true;
    try {
      loop.Wait(kj::mv(reply));
      outcome = "acknowledged";
    } catch (const kj::Exception& e) {
      outcome = std::string("refused: ") + e.getDescription().cStr();
    }
    done = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return connected.load(); }));
  a->process().Signal(SIGSTOP);
  stopped = true;
  const bool b_leads = WaitUntil([&] { return sent.load(); }) && WaitLeading(*b);
  a->process().Signal(SIGCONT);
  writer.join();
  ASSERT_TRUE(b_leads) << Ready(*b);
  ASSERT_TRUE(done.load());
  EXPECT_EQ(outcome.rfind("refused: ", 0), 0u) << "the deposed leader acknowledged a write after the takeover: "
                                                << outcome;

  // Same process (same pid, same addresses), now a standby of B.
  ASSERT_TRUE(WaitUntil([&] { return Ready(*a) == "503 standby of " + b->address() + "\n"; })) << Ready(*a);
  CommandResult group = RunDispatchctl({"group", "--etcd=" + cluster_.EndpointList(), "--ha-prefix=/test/ha"});
  ASSERT_EQ(group.exit_code, 0) << group.output;
  EXPECT_NE(group.output.find("pid " + std::to_string(a->process().pid())), std::string::npos) << group.output;
  // The late write was journaled nowhere; the first one survived.
  CommandResult datasets = RunDispatchctl({"--dispatcher=" + b->address(), "datasets"});
  ASSERT_EQ(datasets.exit_code, 0) << datasets.output;
  EXPECT_EQ(datasets.output.find("late"), std::string::npos) << datasets.output;
  const ClosureCounters on_b = GetClosureCounters(b->address());
  EXPECT_EQ(on_b.queued + on_b.waiting + on_b.assigned + on_b.finished, 1u);
  std::ifstream log(dir_.File("a.log"));
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("rejoining the group as a standby"), std::string::npos) << text;
}

// A first etcd endpoint that refuses connections (a member that died) does
// not stop a candidate: the lease grant is tried again on the next endpoint.
// (Before, every fresh candidate whose first endpoint was down stopped at
// once, and with --rejoin ran itself afresh into the same stop forever.)
TEST_F(HaDispatcherTest, ACandidateWhoseFirstEtcdEndpointIsDeadStillLeads) {
  DispatcherProcess::Options options;
  options.work_dir = dir_.File("a");
  options.stderr_path = dir_.File("a.log");
  // Port 1 on loopback: nothing listens there, so connecting is refused.
  options.extra_flags = {"--etcd=http://127.0.0.1:1," + cluster_.EndpointList(), "--ha-prefix=/test/ha",
                         "--lease-ttl-ms=2000", "--rejoin=false"};
  DispatcherProcess a(options);
  EXPECT_TRUE(WaitLeading(a)) << Ready(a);
}

// A clean stop (SIGTERM) revokes the leader's lease: etcd deletes the leader
// key and the member record at once, so a standby takes over long before
// the 60 s TTL could expire.
TEST_F(HaDispatcherTest, ACleanStopRevokesTheLeaseAndAStandbyTakesOverWithoutWaitingForTheTtl) {
  if (access("/usr/bin/etcdctl", X_OK) != 0) GTEST_SKIP() << "etcdctl is not installed (Debian etcd-client)";
  auto a = StartDispatcher("a", {"--lease-ttl-ms=60000"});
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto b = StartDispatcher("b", {"--lease-ttl-ms=60000"});
  ASSERT_TRUE(WaitUntil([&] { return Ready(*b).find("standby of") != std::string::npos; })) << Ready(*b);
  ASSERT_TRUE(WaitUntil([&] { return CountLines(Etcdctl({"get", "--prefix", "--keys-only", "/test/ha/members/"})) == 2; }));
  a->process().Signal(SIGTERM);
  auto status = a->process().Wait(kTestDeadline);
  ASSERT_TRUE(status.has_value() && WIFEXITED(*status)) << "the leader did not stop";
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  // Gone the moment A exited: only a revoke does that before the TTL.
  EXPECT_EQ(CountLines(Etcdctl({"get", "--prefix", "--keys-only", "/test/ha/members/"})), 1u);
  EXPECT_TRUE(WaitLeading(*b)) << Ready(*b);
}

// `dispatchctl group` reads the group from etcd: the leader with its lease,
// every member, and the journal's last sequence number.
TEST_F(HaDispatcherTest, DispatchctlGroupShowsTheLeaderItsLeaseTheMembersAndTheJournalPosition) {
  if (access("/usr/bin/etcdctl", X_OK) != 0) GTEST_SKIP() << "etcdctl is not installed (Debian etcd-client)";
  auto a = StartDispatcher("a");
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto b = StartDispatcher("b");
  ASSERT_TRUE(WaitUntil([&] { return Ready(*b).find("standby of") != std::string::npos; })) << Ready(*b);
  ASSERT_TRUE(WaitUntil([&] { return CountLines(Etcdctl({"get", "--prefix", "--keys-only", "/test/ha/members/"})) == 2; }));
  auto coordinator = MakeCoordinator(a->address());
  for (int i = 0; i < 5; ++i) {
    auto value = coordinator->Schedule("echo", "x");
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    ASSERT_TRUE(WaitUntil([&] { return value->closure_id() != 0; }));
  }
  CommandResult group = RunDispatchctl({"group", "--etcd=" + cluster_.EndpointList(), "--ha-prefix=/test/ha"});
  ASSERT_EQ(group.exit_code, 0) << group.output;
  EXPECT_NE(group.output.find("leader   " + a->address() + "  lease "), std::string::npos) << group.output;
  EXPECT_NE(group.output.find("s left of 2 s)"), std::string::npos) << group.output;
  EXPECT_NE(group.output.find("member   " + a->address()), std::string::npos) << group.output;
  EXPECT_NE(group.output.find("pid " + std::to_string(a->process().pid()) + "  " + a->http_url() + "  (leader)"),
            std::string::npos) << group.output;
  EXPECT_NE(group.output.find("pid " + std::to_string(b->process().pid()) + "  " + b->http_url() + "  (standby)"),
            std::string::npos) << group.output;
  // The journal's keys, as etcdctl counts them, and a last sequence number
  // that covers at least the five acknowledged schedules.
  const size_t keys = CountLines(Etcdctl({"get", "--prefix", "--keys-only", "/test/ha/journal/"}));
  EXPECT_NE(group.output.find("journal  " + std::to_string(keys) + " keys in etcd"), std::string::npos)
      << group.output;
  const size_t at = group.output.find("last sequence number ");
  ASSERT_NE(at, std::string::npos) << group.output;
  EXPECT_GE(std::stoull(group.output.substr(at + 21)), 5u) << group.output;
  // Without --etcd it is a usage error.
  CommandResult usage = RunDispatchctl({"group"});
  EXPECT_EQ(usage.exit_code, 2) << usage.output;
  EXPECT_NE(usage.output.find("'group' needs --etcd"), std::string::npos) << usage.output;
}

// With --rejoin=false a member that lost its leadership exits with code 5
// and leaves its restart to a supervisor.
TEST_F(HaDispatcherTest, ALeaderWhoseKeyWasReplacedIsFencedAtItsNextCommitAndExitsWithCode5) {
  if (access("/usr/bin/etcdctl", X_OK) != 0) GTEST_SKIP() << "etcdctl is not installed (Debian etcd-client)";
  auto a = StartDispatcher("a", {"--rejoin=false"});
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto coordinator = MakeCoordinator(a->address());
  auto first = coordinator->Schedule("echo", "first");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(WaitUntil([&] { return first->closure_id() != 0; })) << "the first schedule was not acknowledged";
  const std::string journal_before = Etcdctl({"get", "--prefix", "--keys-only", "/test/ha/journal/"});
  ASSERT_NE(journal_before.find("/test/ha/journal/"), std::string::npos) << journal_before;
  // Someone else's leadership: the key deleted and created again (a newer
  // create revision), A's lease still alive. A was elected at its first
  // campaign, so no watch tells it: only its next transaction's compare can.
  ASSERT_EQ(Etcdctl({"del", "/test/ha/leader"}).rfind("exit", 0), std::string::npos);
  ASSERT_EQ(Etcdctl({"put", "/test/ha/leader", "tcp:impostor:1"}).rfind("exit", 0), std::string::npos);
  auto late = coordinator->Schedule("echo", "late");
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  auto status = a->process().Wait(kTestDeadline);
  ASSERT_TRUE(status.has_value()) << "the fenced leader did not stop";
  ASSERT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), kExitLeadershipLost);
  EXPECT_EQ(late->closure_id(), 0u) << "a fenced leader acknowledged a write";
  EXPECT_EQ(Etcdctl({"get", "--prefix", "--keys-only", "/test/ha/journal/"}), journal_before)
      << "a fenced leader appended to the journal";
  // It stopped at its transaction's compare, not for another reason.
  std::ifstream log(dir_.File("a.log"));
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("fenced: /test/ha/leader was created at revision"), std::string::npos) << text;
}

// HA mode's limits (reactor/journal_replicator.h): one pass must fit one etcd
// transaction, so a dataset definition over 256 KiB is refused at
// validation, naming the limit, and changes nothing; one under it is served.
TEST_F(HaDispatcherTest, ADatasetDefinitionOverTheHaLimitIsRefusedNamingItAndChangesNothing) {
  auto a = StartDispatcher("a");
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  clients::DispatcherEndpoint endpoint;
  endpoint.address = a->address();
  auto refused = clients::RegisterDatasetAndWait(endpoint, DatasetOf("range count=1 " + std::string(300 << 10, 'x')));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("limit of 262144"), std::string::npos) << refused.status().ToString();
  auto fits = clients::RegisterDatasetAndWait(endpoint, DatasetOf("range count=1 " + std::string(200 << 10, 'x')));
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(fits->dataset_id, 1u) << "the refused one took an id";
}

// Bad HA flags are usage errors (exit 2), found before anything starts.
TEST(HaDispatcherFlags, BadEtcdPrefixOrResultLimitExitsTwo) {
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"--etcd=127.0.0.1:2379"},
           {"--etcd=http://127.0.0.1:1,", "--ha-prefix=/p"},
           {"--etcd=http://127.0.0.1:1", "--ha-prefix=p"},
           {"--etcd=http://127.0.0.1:1", "--ha-prefix=/p/"},
           {"--etcd=http://127.0.0.1:1", "--max-result-bytes=262145"},
           {"--etcd=http://127.0.0.1:1", "--fault-tolerant-mode=false"}}) {
    std::vector<std::string> argv = {DispatcherBinary(), "--listen=tcp:127.0.0.1:0", "--http=off"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Subprocess process(argv);
    auto status = process.Wait(kTestDeadline);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << flags.back();
  }
}

}  // namespace
}  // namespace dispatch::testing
