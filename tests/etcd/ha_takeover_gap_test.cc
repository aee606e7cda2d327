// The takeover gap of HA mode with a long journal (issue 20, docs/
// high_availability.md §5, §6), a measurement, not a check: a leader
// journals HA_GAP_UPDATES updates (default 20000: closures run, fetched and
// released), then kill -9; the test prints how long until the standby
// serves, and the standby's own account of its rebuild (its log lines).
// HA_GAP_SNAPSHOT_EVERY sets --snapshot-every (default 1000). Label
// ha-long: left out of `ctest -L etcd` (about a minute).
#include <signal.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "tests/closures/closure_test_support.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/http_get.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {
namespace {

uint64_t FromEnv(const char* name, uint64_t fallback) {
  const char* value = getenv(name);
  return value == nullptr ? fallback : strtoull(value, nullptr, 10);
}

double Metric(DispatcherProcess& d, const std::string& name) {
  return MetricSample(HttpGet(d.http_url(), "/metrics", "", std::chrono::seconds(5)).body, name);
}

std::string Ready(DispatcherProcess& d) {
  HttpResponse r = HttpGet(d.http_url(), "/readyz", "", std::chrono::seconds(5));
  return std::to_string(r.status) + " " + r.body;
}

TEST(HaTakeoverGap, PrintsTheGapAfterKillOfALeaderWithALongJournal) {
  if (!EtcdCluster::Available()) GTEST_SKIP() << "etcd is not installed";
  const uint64_t updates = FromEnv("HA_GAP_UPDATES", 20000);
  const uint64_t every = FromEnv("HA_GAP_SNAPSHOT_EVERY", 1000);
  EtcdCluster cluster;
  ASSERT_TRUE(cluster.Start()) << cluster.error();
  TempDir dir;
  auto start = [&](const std::string& name) {
    DispatcherProcess::Options options;
    options.work_dir = dir.File(name);
    options.stderr_path = dir.File(name + ".log");
    options.extra_flags = {"--etcd=" + cluster.EndpointList(), "--ha-prefix=/gap", "--lease-ttl-ms=2000",
                           "--snapshot-every=" + std::to_string(every), "--log-level=info"};
    return std::make_unique<DispatcherProcess>(options);
  };
  auto a = start("a");
  ASSERT_TRUE(WaitUntil([&] { return Ready(*a).rfind("200 ", 0) == 0; }));
  auto b = start("b");
  ASSERT_TRUE(WaitUntil([&] { return Ready(*b).find("standby of") != std::string::npos; }));
  auto worker = StartClosureWorker(a->address(), 4);
  auto coordinator = MakeCoordinator(a->address());
  double records = 0;
  const auto load_start = std::chrono::steady_clock::now();
  for (int wave = 0; records < static_cast<double>(updates) && wave < 100000; ++wave) {
    std::vector<clients::RemoteValue> values;
    for (int i = 0; i < 64; ++i) {
      auto value = coordinator->Schedule("echo", "x");
      ASSERT_TRUE(value.ok()) << value.status().ToString();
      values.push_back(*value);
    }
    for (auto& v : values) ASSERT_EQ(FetchOrDie(v), "x");
    if (wave % 8 == 0) records = Metric(*a, "dispatch_journal_records_total");
  }
  records = Metric(*a, "dispatch_journal_records_total");
  printf("journaled %.0f updates in %.1f s; etcd snapshots %.0f (--snapshot-every=%llu)\n", records,
         std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count(),
         Metric(*a, "dispatch_etcd_snapshots_total"), static_cast<unsigned long long>(every));
  coordinator.reset();
  worker->Kill9();
  // The hot standby's local copy: its WAL is checkpointed as it grows.
  for (const char* file : {"b/ha-cache/dispatch.db", "b/ha-cache/dispatch.db-wal"}) {
    std::ifstream in(dir.File(file), std::ios::binary | std::ios::ate);
    printf("standby's %s: %lld bytes\n", file, static_cast<long long>(in ? static_cast<long long>(in.tellg()) : -1));
  }
  const auto killed = std::chrono::steady_clock::now();
  a->process().Signal(SIGKILL);
  ASSERT_TRUE(a->process().Wait(kTestDeadline).has_value());
  ASSERT_TRUE(WaitUntil([&] { return Ready(*b).rfind("200 ", 0) == 0; }, std::chrono::seconds(120)));
  printf("takeover gap: the standby served %lld ms after kill -9 of the leader\n",
         static_cast<long long>(
             std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed).count()));
  std::ifstream log(dir.File("b.log"));
  std::string line;
  while (std::getline(log, line)) {
    for (const char* step : {"elected", "holds the snapshot", "standby: loaded", "recovered state", "caught up",
                             "live state"}) {
      if (line.find(step) == std::string::npos) continue;
      printf("b: %s\n", line.c_str());
      break;
    }
  }
}

}  // namespace
}  // namespace dispatch::testing
