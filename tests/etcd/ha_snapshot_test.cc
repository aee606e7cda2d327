// HA mode's snapshots in etcd (docs/high_availability.md §5) with real
// processes: a real etcd (tests/support/etcd_cluster.h), real dispatchers,
// dispatch-worker and dispatchctl.
//  - with a small --snapshot-every, the journal keys in etcd stay few while
//    thousands of updates go by, and a takeover after kill -9 of the leader
//    by a hot standby (§6: it followed the journal and the snapshots) keeps
//    every acknowledged dataset, job, closure and held result;
//  - a damaged snapshot chunk is refused at takeover, naming its key;
//  - a leader killed between its chunks and their switch leaves orphan
//    chunks: the takeover uses the previous complete snapshot, keeps every
//    acknowledged closure, and the next snapshot deletes the orphans;
//  - a standby stopped while the leader journals and compacts past its watch
//    gets the watch canceled, loads again, and still takes over with every
//    acknowledged registration;
//  - a standby whose watch stalls (neither delivers nor ends) loads again
//    and catches up, and still takes over when the leader dies.
// Takeover gaps are printed, never asserted.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "clients/blocking_dataset_client.h"
#include "tests/clients/client_test_support.h"
#include "tests/closures/closure_test_support.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/http_get.h"
#include "tests/support/stalling_relay.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {
namespace {

constexpr int kExitLeadershipLost = 5;  // reactor/durable_state.h
constexpr const char* kPrefix = "/test/ha";

class HaSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Available()) {
      GTEST_SKIP() << "etcd is not installed (Debian etcd-server; scripts/bootstrap.sh installs it)";
    }
    if (access("/usr/bin/etcdctl", X_OK) != 0) GTEST_SKIP() << "etcdctl is not installed (Debian etcd-client)";
    ASSERT_TRUE(cluster_.Start()) << cluster_.error();
    // Every hot takeover checks its live state against a replay.
    setenv("DISPATCH_TEST_HA_CHECK_LIVE_STATE", "1", 1);
  }

  // A failed test shows the end of every dispatcher's log.
  void TearDown() override {
    unsetenv("DISPATCH_TEST_HA_CHECK_LIVE_STATE");
    if (!HasFailure()) return;
    for (const char* name : {"a", "b"}) {
      const std::string log = Log(name);
      printf("--- end of %s.log ---\n%s\n", name, log.substr(log.size() > 4000 ? log.size() - 4000 : 0).c_str());
    }
  }

  std::unique_ptr<DispatcherProcess> StartDispatcher(const std::string& name, uint64_t snapshot_every,
                                                     std::vector<std::string> more_flags = {}) {
    DispatcherProcess::Options options;
    options.work_dir = dir_.File(name);
    options.stderr_path = dir_.File(name + ".log");
    options.extra_flags = {"--etcd=" + cluster_.EndpointList(), std::string("--ha-prefix=") + kPrefix,
                           "--lease-ttl-ms=2000", "--worker-heartbeat-interval-ms=100",
                           "--snapshot-every=" + std::to_string(snapshot_every), "--log-level=info",
                           // A stopped member exits (5) instead of rejoining: the tests check why.
                           "--rejoin=false"};
    for (std::string& flag : more_flags) options.extra_flags.push_back(std::move(flag));
    return std::make_unique<DispatcherProcess>(options);
  }

  static std::string Ready(DispatcherProcess& d) {
    HttpResponse r = HttpGet(d.http_url(), "/readyz", "", std::chrono::seconds(5));
    return std::to_string(r.status) + " " + r.body;
  }

  static bool WaitLeading(DispatcherProcess& d) {
    return WaitUntil([&] { return Ready(d).rfind("200 ", 0) == 0; });
  }

  // One sample of /metrics (no labels); -1 when absent.
  static double Metric(DispatcherProcess& d, const std::string& name) {
    return MetricSample(HttpGet(d.http_url(), "/metrics", "", std::chrono::seconds(5)).body, name);
  }

  std::string Etcdctl(std::vector<std::string> args) { return cluster_.Etcdctl(std::move(args)); }

  std::vector<std::string> Keys(const std::string& under) {
    std::vector<std::string> keys;
    std::istringstream lines(Etcdctl({"get", "--prefix", "--keys-only", under}));
    std::string line;
    while (std::getline(lines, line)) {
      if (!line.empty()) keys.push_back(line);
    }
    return keys;
  }

  // The S of every chunk prefix under P/snapshot/ (not "current").
  std::set<std::string> ChunkPrefixes() {
    std::set<std::string> out;
    const std::string base = std::string(kPrefix) + "/snapshot/";
    for (const std::string& key : Keys(base)) {
      const std::string rest = key.substr(base.size());
      if (rest == "current") continue;
      out.insert(rest.substr(0, rest.find('/')));
    }
    return out;
  }

  std::string Log(const std::string& name) {
    std::ifstream log(dir_.File(name + ".log"));
    return std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  }

  // Schedules `n` closures of `coordinator` and waits until each is
  // acknowledged (has its id); their ids, or fewer when the leader died.
  static std::vector<uint64_t> ScheduleAcknowledged(clients::Coordinator& coordinator, int n, int tag) {
    std::vector<clients::RemoteValue> values;
    for (int i = 0; i < n; ++i) {
      auto value = coordinator.Schedule("echo", "value " + std::to_string(tag) + "." + std::to_string(i));
      if (!value.ok()) break;
      values.push_back(*value);
    }
    WaitUntil(
        [&] {
          for (auto& v : values) {
            if (v.closure_id() == 0) return false;
          }
          return true;
        },
        std::chrono::seconds(10));
    std::vector<uint64_t> ids;
    for (auto& v : values) {
      if (v.closure_id() != 0) ids.push_back(v.closure_id());
    }
    return ids;
  }

  TempDir dir_;
  EtcdCluster cluster_;
};

TEST_F(HaSnapshotTest, JournalKeysStayFewAndATakeoverKeepsEveryAcknowledgedChange) {
  constexpr uint64_t kEvery = 64;
  auto a = StartDispatcher("a", kEvery);
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto b = StartDispatcher("b", kEvery);
  ASSERT_TRUE(WaitUntil([&] { return Ready(*b).find("standby of " + a->address()) != std::string::npos; }))
      << Ready(*b);

  auto worker = StartClosureWorker(a->address(), 2);
  CommandResult read = RunDispatchctl({"--dispatcher=" + a->address(), "read", "--mode=dynamic", "range",
                                       "count=200", "splits=8"});
  ASSERT_EQ(read.exit_code, 0) << read.output;
  // Waves of closures: half of each wave fetched (released: their results
  // are deleted), half held, so the snapshot carries results and the
  // journal carries their deletions.
  constexpr uint64_t kCoordinatorId = 77;
  auto coordinator = MakeCoordinator(a->address(), kCoordinatorId);
  std::map<uint64_t, std::string> held;
  double records = 0;
  for (int wave = 0; wave < 200 && records < 40 * kEvery; ++wave) {
    std::vector<clients::RemoteValue> values;
    for (int i = 0; i < 16; ++i) {
      auto value = coordinator->Schedule("echo", "w" + std::to_string(wave) + "." + std::to_string(i));
      ASSERT_TRUE(value.ok()) << value.status().ToString();
      values.push_back(*value);
    }
    for (size_t i = 0; i < values.size(); ++i) {
      const std::string expected = "w" + std::to_string(wave) + "." + std::to_string(i);
      if (i % 2 == 0) {
        ASSERT_EQ(FetchOrDie(values[i]), expected);
      } else {
        ASSERT_TRUE(WaitUntil([&] { return values[i].status() == clients::RemoteValueStatus::kReady; }));
        held[values[i].closure_id()] = expected;
      }
    }
    records = Metric(*a, "dispatch_journal_records_total");
  }
  ASSERT_GE(records, 40.0 * kEvery) << "the load journaled too little";
  worker->Kill9();
  // Once the last snapshot is current, etcd holds the journal after it only.
  size_t keys = 0;
  EXPECT_TRUE(WaitUntil([&] {
    keys = Keys(std::string(kPrefix) + "/journal/").size();
    return keys <= 4 * kEvery;
  })) << keys << " journal keys in etcd after " << records << " records";
  printf("%.0f records journaled; %zu journal keys left in etcd; %.0f snapshots, %.0f keys deleted, "
         "%.0f compactions\n",
         records, keys, Metric(*a, "dispatch_etcd_snapshots_total"), Metric(*a, "dispatch_etcd_keys_deleted_total"),
         Metric(*a, "dispatch_etcd_compactions_total"));
  EXPECT_GE(Metric(*a, "dispatch_etcd_snapshots_total"), 2);
  EXPECT_GT(Metric(*a, "dispatch_etcd_keys_deleted_total"), 0);
  EXPECT_GE(Metric(*a, "dispatch_etcd_compactions_total"), 1);
  // (A snapshot given up is benign: its file may be replaced by a newer one
  // before the encoding job opened it. Not asserted.)
  EXPECT_NE(Etcdctl({"get", "--keys-only", std::string(kPrefix) + "/snapshot/current"})
                .find(std::string(kPrefix) + "/snapshot/current"),
            std::string::npos);

  // Closed, the coordinator has sent the releases of what it fetched.
  coordinator.reset();
  ASSERT_TRUE(WaitForCounters(a->address(), [&](const ClosureCounters& c) { return c.finished == held.size(); }));
  CommandResult datasets_before = RunDispatchctl({"--dispatcher=" + a->address(), "datasets"});
  ASSERT_EQ(datasets_before.exit_code, 0) << datasets_before.output;
  CommandResult jobs_before = RunDispatchctl({"--dispatcher=" + a->address(), "jobs"});
  ASSERT_EQ(jobs_before.exit_code, 0) << jobs_before.output;
  const ClosureCounters closures_before = GetClosureCounters(a->address());

  const auto killed = std::chrono::steady_clock::now();
  a->process().Signal(SIGKILL);
  ASSERT_TRUE(a->process().Wait(kTestDeadline).has_value());
  ASSERT_TRUE(WaitLeading(*b)) << Ready(*b) << Log("b");
  printf("standby served %lld ms after kill -9 of the leader\n",
         static_cast<long long>(
             std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed).count()));
  const std::string log = Log("b");
  EXPECT_NE(log.find("holds the snapshot at record "), std::string::npos) << log;
  EXPECT_EQ(log.find("holds the snapshot at record 0 "), std::string::npos) << log;
  // A hot standby (§6): it had followed the journal and took the snapshots
  // over as they became current, so at its election only the end was left.
  EXPECT_NE(log.find("standby: loaded the snapshot at record "), std::string::npos) << log;
  EXPECT_NE(log.find("reading the journal after record "), std::string::npos) << log;
  // And it served from the state it had kept live (§6: nothing to replay),
  // which equals a replay of its store (DISPATCH_TEST_HA_CHECK_LIVE_STATE).
  EXPECT_NE(log.find("took the standby's live state over"), std::string::npos) << log;
  EXPECT_NE(log.find("the live state matches the store's replay through record "), std::string::npos) << log;

  CommandResult datasets_after = RunDispatchctl({"--dispatcher=" + b->address(), "datasets"});
  EXPECT_EQ(datasets_after.output, datasets_before.output);
  CommandResult jobs_after = RunDispatchctl({"--dispatcher=" + b->address(), "jobs"});
  EXPECT_EQ(jobs_after.output, jobs_before.output);
  const ClosureCounters closures_after = GetClosureCounters(b->address());
  EXPECT_EQ(closures_after.finished, closures_before.finished);
  EXPECT_EQ(closures_after.finished, held.size());
  // Every held result is served by the new leader, bytes intact.
  auto again = MakeCoordinator(b->address(), kCoordinatorId);
  for (const auto& [id, expected] : held) {
    EXPECT_EQ(FetchOrDie(again->Attach(id)), expected) << "closure " << id;
  }
}

TEST_F(HaSnapshotTest, ADamagedSnapshotChunkIsRefusedAtTakeoverNamingItsKey) {
  auto a = StartDispatcher("a", 32);
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  // No worker: each schedule is journaled and stays queued.
  auto coordinator = MakeCoordinator(a->address());
  int wave = 0;
  ASSERT_TRUE(WaitUntil([&] {
    EXPECT_EQ(ScheduleAcknowledged(*coordinator, 20, wave++).size(), 20u);
    return Metric(*a, "dispatch_etcd_snapshots_total") >= 1;
  })) << "no snapshot reached etcd";
  // Quiet: the last switch left exactly one snapshot's chunks.
  std::set<std::string> prefixes;
  ASSERT_TRUE(WaitUntil([&] {
    prefixes = ChunkPrefixes();
    return prefixes.size() == 1;
  })) << prefixes.size();
  a->process().Signal(SIGKILL);
  ASSERT_TRUE(a->process().Wait(kTestDeadline).has_value());
  const std::string chunk = std::string(kPrefix) + "/snapshot/" + *prefixes.begin() + "/00000000000000000000";
  ASSERT_EQ(Etcdctl({"put", chunk, "not the chunk that was written"}).rfind("exit", 0), std::string::npos);

  auto b = StartDispatcher("b", 32);
  auto status = b->process().Wait(kTestDeadline);
  ASSERT_TRUE(status.has_value()) << "the standby served from a damaged snapshot: " << Ready(*b);
  ASSERT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), kExitLeadershipLost);
  const std::string log = Log("b");
  EXPECT_NE(log.find("etcd snapshot chunk " + chunk + " fails its CRC32C"), std::string::npos) << log;
}

TEST_F(HaSnapshotTest, ALeaderKilledBeforeItsSwitchLeavesOrphansTheTakeoverIgnoresAndTheNextSnapshotDeletes) {
  // A kills itself after the chunks of its second etcd snapshot, before the
  // switch (a test hook read from the environment at start).
  setenv("DISPATCH_TEST_HA_SNAPSHOT_KILL_BEFORE_SWITCH", "2", 1);
  auto a = StartDispatcher("a", 32);
  unsetenv("DISPATCH_TEST_HA_SNAPSHOT_KILL_BEFORE_SWITCH");
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  constexpr uint64_t kCoordinatorId = 78;
  size_t acknowledged = 0;
  {
    auto coordinator = MakeCoordinator(a->address(), kCoordinatorId);
    for (int wave = 0; wave < 100 && !a->process().Wait(std::chrono::milliseconds(0)).has_value(); ++wave) {
      acknowledged += ScheduleAcknowledged(*coordinator, 10, wave).size();
    }
  }
  auto status = a->process().Wait(kTestDeadline);
  ASSERT_TRUE(status.has_value()) << "the leader never reached its second snapshot";
  ASSERT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL) << *status;
  ASSERT_NE(Log("a").find("test hook: killed after the chunks"), std::string::npos) << Log("a");
  // The previous snapshot is current; the killed one's chunks are orphans.
  const std::set<std::string> before = ChunkPrefixes();
  EXPECT_EQ(before.size(), 2u);

  // B starts now: whether it loads while A's lease runs out (hot) or at its
  // election (cold), it reads what is current in etcd.
  auto b = StartDispatcher("b", 32);
  ASSERT_TRUE(WaitLeading(*b)) << Ready(*b) << Log("b");
  const std::string log = Log("b");
  EXPECT_NE(log.find("holds the snapshot at record " + std::to_string(std::stoull(*before.begin())) + " "),
            std::string::npos)
      << log;
  const ClosureCounters on_b = GetClosureCounters(b->address());
  // Every acknowledged schedule is there (one the leader journaled but died
  // before acknowledging may be too).
  EXPECT_GE(on_b.queued, acknowledged);
  EXPECT_GT(acknowledged, 0u);

  // B's own snapshots: the next switch deletes every other chunk prefix.
  auto coordinator = MakeCoordinator(b->address(), kCoordinatorId);
  std::set<std::string> after;
  ASSERT_TRUE(WaitUntil([&] {
    ScheduleAcknowledged(*coordinator, 10, 1000);
    after = ChunkPrefixes();
    return Metric(*b, "dispatch_etcd_snapshots_total") >= 1 && after.size() == 1;
  })) << after.size();
  for (const std::string& orphan : before) EXPECT_EQ(after.count(orphan), 0u) << orphan;
}

// §6: a hot standby checks what its watch brings as a takeover checks what
// it reads: a damaged group stops it (exit 5) naming the key.
TEST_F(HaSnapshotTest, AHotStandbyStopsOnADamagedJournalGroupNamingItsKey) {
  auto a = StartDispatcher("a", 1000);
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto b = StartDispatcher("b", 1000);
  ASSERT_TRUE(WaitUntil([&] { return Ready(*b).find("standby of " + a->address()) != std::string::npos; }))
      << Ready(*b);
  ASSERT_TRUE(WaitUntil([&] { return Log("b").find("following the journal") != std::string::npos; })) << Log("b");
  auto coordinator = MakeCoordinator(a->address());
  ASSERT_EQ(ScheduleAcknowledged(*coordinator, 10, 0).size(), 10u);
  // The key after the last record A journaled (A started on an empty etcd).
  const uint64_t last = static_cast<uint64_t>(Metric(*a, "dispatch_journal_records_total"));
  char digits[32];
  snprintf(digits, sizeof(digits), "%020llu", static_cast<unsigned long long>(last + 1));
  const std::string key = std::string(kPrefix) + "/journal/" + digits;
  ASSERT_EQ(Etcdctl({"put", key, "not a journal group of ours"}).rfind("exit", 0), std::string::npos);
  auto status = b->process().Wait(kTestDeadline);
  ASSERT_TRUE(status.has_value()) << "the standby went on after a damaged group";
  ASSERT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), kExitLeadershipLost);
  const std::string log = Log("b");
  EXPECT_NE(log.find("etcd journal key " + key), std::string::npos) << log;
}

// §6: a standby that falls behind a compaction (stopped while the leader
// journals more than its stream can buffer and compacts at its snapshots)
// gets its watch canceled by etcd, loads again from a fresh store, follows
// again, and still takes over with every acknowledged change (its live state
// checked against a replay).
TEST_F(HaSnapshotTest, AStandbyBehindACompactionLoadsAgainAndStillTakesOverWithEverything) {
  auto a = StartDispatcher("a", 32);
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  // A lease that outlives the stop: b stays a candidate (a standby stopped
  // past its lease starts afresh instead, which loads anyway).
  auto b = StartDispatcher("b", 32, {"--lease-ttl-ms=120000"});
  ASSERT_TRUE(WaitUntil([&] { return Metric(*b, "dispatch_ha_standby_following") == 1; })) << Log("b");
  ASSERT_EQ(Metric(*b, "dispatch_ha_standby_reloads_total"), 0);
  b->process().Signal(SIGSTOP);
  // About 10 MB of definitions gzip cannot shrink much (to fill the socket
  // and gRPC buffers between etcd and the stopped reader), then hundreds of
  // small ones (each transaction one more message in etcd's watch queue for
  // b, which holds 128): etcd sets b's watcher aside, and the snapshots every
  // 32 records compact past it.
  clients::DispatcherEndpoint endpoint;
  endpoint.address = a->address();
  std::map<uint64_t, std::string> registered;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 600; ++i) {
    std::string definition = "range count=" + std::to_string(i + 1) + " ";
    for (int c = 0; c < (i < 50 ? (200 << 10) : 0); ++c) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      definition.push_back(static_cast<char>('0' + (x % 64)));
    }
    auto id = clients::RegisterDatasetAndWait(endpoint, DatasetOf(definition));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    registered[id->dataset_id] = definition;
  }
  ASSERT_GE(Metric(*a, "dispatch_etcd_compactions_total"), 1);
  b->process().Signal(SIGCONT);
  const double leader_records = Metric(*a, "dispatch_journal_records_total");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Metric(*b, "dispatch_ha_standby_reloads_total") >= 1 &&
               Metric(*b, "dispatch_ha_standby_following") == 1 &&
               Metric(*b, "dispatch_ha_standby_seq") >= leader_records;
      },
      std::chrono::seconds(60)))
      << "reloads " << Metric(*b, "dispatch_ha_standby_reloads_total") << ", following "
      << Metric(*b, "dispatch_ha_standby_following") << ", at " << Metric(*b, "dispatch_ha_standby_seq") << " of "
      << leader_records << "\n"
      << Log("b");
  // Why it loaded again: etcd's cancel, or (if the stream stalled instead of
  // ending, seen once under heavy load) the follower's own stall check.
  const std::string reloaded = Log("b");
  EXPECT_TRUE(reloaded.find("compacted at revision") != std::string::npos ||
              reloaded.find("the journal watch stalled") != std::string::npos)
      << reloaded;

  a->process().Signal(SIGKILL);
  ASSERT_TRUE(a->process().Wait(kTestDeadline).has_value());
  ASSERT_TRUE(WaitLeading(*b)) << Ready(*b) << Log("b");
  const std::string log = Log("b");
  EXPECT_NE(log.find("the live state matches the store's replay through record "), std::string::npos) << log;
  endpoint.address = b->address();
  for (const auto& [id, definition] : registered) {
    auto again = clients::RegisterDatasetAndWait(endpoint, DatasetOf(definition));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->dataset_id, id) << "an acknowledged registration was lost";
  }
}

// §6: a standby whose journal watch stalls (a relay holds etcd's bytes for
// the watch streams: they neither deliver nor end) tells it from the last
// journal key's revision within two checks, loads again and follows the
// leader's journal to its end.
TEST_F(HaSnapshotTest, AStandbyWhoseJournalWatchStallsLoadsAgainAndCatchesUp) {
  const std::string etcd = cluster_.endpoints().at(0);
  ASSERT_EQ(etcd.rfind("http://", 0), 0u) << etcd;
  StallingRelay relay("tcp:" + etcd.substr(7));
  auto a = StartDispatcher("a", 1000);
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto b = StartDispatcher("b", 1000, {"--etcd=http://127.0.0.1:" + std::to_string(relay.port())});
  ASSERT_TRUE(WaitUntil([&] { return Metric(*b, "dispatch_ha_standby_following") == 1; })) << Log("b");
  ASSERT_EQ(Metric(*b, "dispatch_ha_standby_reloads_total"), 0);
  // The journal's watch, the current snapshot's and the election's.
  ASSERT_GE(relay.Stall("POST /v3/watch"), 2u) << relay.failure();

  clients::DispatcherEndpoint endpoint;
  endpoint.address = a->address();
  for (int i = 0; i < 20; ++i) {
    auto id = clients::RegisterDatasetAndWait(endpoint, DatasetOf("range count=" + std::to_string(i + 1)));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
  }
  const double leader_records = Metric(*a, "dispatch_journal_records_total");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Metric(*b, "dispatch_ha_standby_reloads_total") >= 1 &&
               Metric(*b, "dispatch_ha_standby_following") == 1 &&
               Metric(*b, "dispatch_ha_standby_seq") >= leader_records;
      },
      std::chrono::seconds(60)))
      << "reloads " << Metric(*b, "dispatch_ha_standby_reloads_total") << ", at "
      << Metric(*b, "dispatch_ha_standby_seq") << " of " << leader_records << "\n"
      << Log("b");
  EXPECT_NE(Log("b").find("the journal watch stalled"), std::string::npos) << Log("b");
  EXPECT_EQ(relay.failure(), "");
}

// §3: a standby whose watch on the leader key stalls still sees the leader
// go (it reads the key once per lease TTL) and takes over with every
// acknowledged registration.
TEST_F(HaSnapshotTest, AStandbyWhoseWatchesStallStillTakesOverWhenTheLeaderDies) {
  const std::string etcd = cluster_.endpoints().at(0);
  ASSERT_EQ(etcd.rfind("http://", 0), 0u) << etcd;
  StallingRelay relay("tcp:" + etcd.substr(7));
  auto a = StartDispatcher("a", 1000);
  ASSERT_TRUE(WaitLeading(*a)) << Ready(*a);
  auto b = StartDispatcher("b", 1000, {"--etcd=http://127.0.0.1:" + std::to_string(relay.port())});
  ASSERT_TRUE(WaitUntil([&] { return Metric(*b, "dispatch_ha_standby_following") == 1; })) << Log("b");
  // Every watch b has: the leader key's and the journal's (and the current
  // snapshot's); the journal's stall check brings new ones, which flow.
  ASSERT_GE(relay.Stall("POST /v3/watch"), 2u) << relay.failure();

  clients::DispatcherEndpoint endpoint;
  endpoint.address = a->address();
  std::map<uint64_t, std::string> registered;
  for (int i = 0; i < 20; ++i) {
    const std::string definition = "range count=" + std::to_string(i + 1);
    auto id = clients::RegisterDatasetAndWait(endpoint, DatasetOf(definition));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    registered[id->dataset_id] = definition;
  }
  a->process().Signal(SIGKILL);
  ASSERT_TRUE(a->process().Wait(kTestDeadline).has_value());
  ASSERT_TRUE(WaitLeading(*b)) << Ready(*b) << Log("b");
  EXPECT_NE(Log("b").find("its watch did not tell"), std::string::npos) << Log("b");
  endpoint.address = b->address();
  for (const auto& [id, definition] : registered) {
    auto again = clients::RegisterDatasetAndWait(endpoint, DatasetOf(definition));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->dataset_id, id) << "an acknowledged registration was lost";
  }
  EXPECT_EQ(relay.failure(), "");
}

}  // namespace
}  // namespace dispatch::testing
