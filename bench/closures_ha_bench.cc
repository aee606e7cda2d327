// `dispatch-bench closures-ha`: the closures benchmark's two figures against a
// single-node dispatcher and, in the same run, against HA dispatchers
// (--etcd) on a 1-member and a 3-member etcd group (real etcd members on free
// loopback ports, tests/support/etcd_cluster.h): closures/s (--closures
// no-op closures on --workers dispatch-worker processes, all scheduled, then
// all fetched) and the sequential round trip (schedule one no-op, fetch it).
// For each group it prints the etcd journal transaction latency the leader
// measured in that run (its dispatch_etcd_journal_transaction_seconds
// histogram, read from /metrics; interpolated inside its buckets) and issue
// 20's targets: the group's round trip p50 <= single node's p50 + 1.5 x the
// transaction p50; the group's closures/s >= 50% of single node's.
// Benchmarks report, never assert.
#include <stdio.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/ha_bench_support.h"
#include "bench/latency.h"
#include "bench/noop_closures.h"
#include "bench/registry.h"
#include "clients/coordinator.h"
#include "common/flag_parser.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/subprocess.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct HaBenchFlags {
  uint64_t closures = 20000;
  uint64_t workers = 2;
  uint64_t slots = 1024;
  uint64_t sequential = 1000;
  uint64_t warmup = 100;
  std::string members = "1,3";
};

struct Figures {
  std::string name;
  double closures_per_second = 0;
  double p50_us = 0;
  double p99_us = 0;
  TxnQuantiles txn;
};

void CheckOk(const Status& status, const char* what) {
  if (!status.ok()) throw std::runtime_error(std::string(what) + ": " + status.ToString());
}

Figures Measure(const std::string& name, const HaBenchFlags& flags, const std::string& etcd) {
  Figures figures;
  figures.name = name;
  auto started = StartReadyDispatcher(name, etcd);
  testing::DispatcherProcess& dispatcher = *started;
  std::vector<std::unique_ptr<testing::Subprocess>> workers;
  for (uint64_t i = 0; i < flags.workers; ++i) workers.push_back(StartNoopWorker(dispatcher.address(), flags.slots));
  clients::CoordinatorOptions coordinator_options;
  coordinator_options.dispatcher_address = dispatcher.address();
  auto created = clients::Coordinator::Create(coordinator_options);
  CheckOk(created.status(), "Coordinator::Create");
  std::unique_ptr<clients::Coordinator> coordinator = std::move(created).value();

  figures.closures_per_second = NoopClosuresPerSecond(*coordinator, flags.closures);

  LatencySamples samples;
  for (uint64_t i = 0; i < flags.warmup + flags.sequential; ++i) {
    auto begin = Clock::now();
    auto value = coordinator->Schedule("noop");
    CheckOk(value.status(), "Schedule");
    CheckOk(value->Fetch().status(), "Fetch");
    if (i >= flags.warmup) {
      samples.Add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - begin).count());
    }
  }
  figures.p50_us = samples.PercentileMicros(50);
  figures.p99_us = samples.PercentileMicros(99);
  if (!etcd.empty()) figures.txn = ReadTxnQuantiles(dispatcher.http_url());
  coordinator.reset();
  return figures;
}

int RunClosuresHa(int argc, char** argv) {
  HaBenchFlags flags;
  FlagParser parser("dispatch-bench closures-ha",
                    "closures/s and the sequential round trip, single node beside HA dispatchers on "
                    "1- and 3-member etcd groups, with the etcd transaction latency of the same run");
  parser.AddUint("closures", "no-op closures in the throughput phase", &flags.closures, 1, 100000000);
  parser.AddUint("workers", "dispatch-worker processes", &flags.workers, 1, 64);
  parser.AddUint("slots", "closure slots per worker (--max-closures)", &flags.slots, 1, 1024);
  parser.AddUint("sequential", "round trips in the sequential phase", &flags.sequential, 1, 10000000);
  parser.AddUint("warmup", "round trips before measuring", &flags.warmup, 0, 1000000);
  parser.AddString("members", "LIST", "etcd group sizes to measure, comma-separated (e.g. 1,3)",
                   &flags.members);
  ParseFlagsOrExit(parser, argc, argv);
  if (!testing::EtcdCluster::Available()) {
    fprintf(stderr, "closures-ha: etcd is not installed (Debian etcd-server)\n");
    return 1;
  }
  std::vector<Figures> all;
  ForEachSetup(flags.members, [&](const std::string& name, const std::string& etcd) {
    all.push_back(Measure(name, flags, etcd));
  });
  printf("\nclosures-ha: %llu no-op closures on %llu workers x %llu slots; %llu sequential round trips\n",
         static_cast<unsigned long long>(flags.closures), static_cast<unsigned long long>(flags.workers),
         static_cast<unsigned long long>(flags.slots), static_cast<unsigned long long>(flags.sequential));
  // B/closure: the journal bytes etcd acknowledged over the whole run,
  // per closure run (both phases and the warm-up).
  const double closures_run = static_cast<double>(flags.closures + flags.warmup + flags.sequential);
  printf("%-18s %12s %10s %10s %12s %12s %8s %10s\n", "dispatcher", "closures/s", "rt p50 us", "rt p99 us",
         "etcd txn p50", "etcd txn p99", "txns", "B/closure");
  for (const Figures& f : all) {
    if (f.txn.p50_us < 0) {
      printf("%-18s %12.0f %10.1f %10.1f %12s %12s %8s %10s\n", f.name.c_str(), f.closures_per_second, f.p50_us,
             f.p99_us, "-", "-", "-", "-");
    } else {
      printf("%-18s %12.0f %10.1f %10.1f %12.1f %12.1f %8llu %10.0f\n", f.name.c_str(), f.closures_per_second,
             f.p50_us, f.p99_us, f.txn.p50_us, f.txn.p99_us, static_cast<unsigned long long>(f.txn.transactions),
             static_cast<double>(f.txn.bytes) / closures_run);
    }
  }
  const Figures& single = all.front();
  for (size_t i = 1; i < all.size(); ++i) {
    const Figures& g = all[i];
    const double bound = single.p50_us + 1.5 * g.txn.p50_us;
    printf("%s: round trip p50 %.1f us vs target <= %.1f (single %.1f + 1.5 x txn p50 %.1f): %s\n",
           g.name.c_str(), g.p50_us, bound, single.p50_us, g.txn.p50_us, g.p50_us <= bound ? "met" : "NOT met");
    printf("%s: closures/s %.0f vs target >= %.0f (50%% of single): %s\n", g.name.c_str(),
           g.closures_per_second, 0.5 * single.closures_per_second,
           g.closures_per_second >= 0.5 * single.closures_per_second ? "met" : "NOT met");
  }
  return 0;
}

}  // namespace

DISPATCH_BENCH("closures-ha",
               "closures/s and round trips: single node beside HA dispatchers on etcd groups", RunClosuresHa);

}  // namespace dispatch::bench
