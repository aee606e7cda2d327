// `dispatch-bench dataservice-ha`: the data service's durable calls
// (bench/dataservice_calls.h: sequential single getSplit, batched getSplit,
// sequential and pipelined getOrCreateJob) against a single-node dispatcher
// and, in the same run, against HA dispatchers (--etcd) on 1- and 3-member
// etcd groups, with the etcd journal transaction latency each leader
// measured in that run, and issue 20's targets applied to them: the group's
// getSplit round trip p50 <= single node's p50 + 1.5 x the transaction p50;
// the group's pipelined getOrCreateJob calls/s >= 50% of single node's.
// Benchmarks report, never assert.
#include <stdio.h>

#include <string>
#include <vector>

#include "bench/dataservice_calls.h"
#include "bench/ha_bench_support.h"
#include "bench/registry.h"
#include "common/flag_parser.h"
#include "tests/support/etcd_cluster.h"

namespace dispatch::bench {
namespace {

struct HaDsFlags {
  SplitRun splits{2000, 1024, 200};
  JobRun jobs{1000, 10000, 64};
  std::string members = "1,3";
};

struct DsHaFigures {
  std::string name;
  SplitFigures splits;
  JobFigures jobs;
  TxnQuantiles txn;
};

const char* Verdict(bool met) { return met ? "met" : "NOT met"; }

int RunDataServiceHa(int argc, char** argv) {
  HaDsFlags flags;
  FlagParser parser("dispatch-bench dataservice-ha",
                    "getSplit and getOrCreateJob, single node beside HA dispatchers on 1- and "
                    "3-member etcd groups, with the etcd transaction latency of the same run");
  DeclareSplitAndJobFlags(parser, flags.splits, flags.jobs);
  parser.AddString("members", "LIST", "etcd group sizes to measure, comma-separated (e.g. 1,3)",
                   &flags.members);
  ParseFlagsOrExit(parser, argc, argv);
  if (!testing::EtcdCluster::Available()) {
    fprintf(stderr, "dataservice-ha: etcd is not installed (Debian etcd-server)\n");
    return 1;
  }
  std::vector<DsHaFigures> all;
  ForEachSetup(flags.members, [&](const std::string& name, const std::string& etcd) {
    DsHaFigures f;
    f.name = name;
    auto dispatcher = StartReadyDispatcher(name, etcd);
    f.splits = MeasureSplits(dispatcher->address(), flags.splits);
    f.jobs = MeasureJobs(dispatcher->address(), flags.jobs);
    if (!etcd.empty()) f.txn = ReadTxnQuantiles(dispatcher->http_url());
    fprintf(stderr, "dataservice-ha: %s done\n", name.c_str());
    all.push_back(f);
  });
  printf("\ndataservice-ha: %llu sequential getSplit, %llu batched (max %llu); %llu sequential and %llu "
         "pipelined (%llu in flight) getOrCreateJob\n",
         static_cast<unsigned long long>(flags.splits.single_splits),
         static_cast<unsigned long long>(flags.splits.batched_calls),
         static_cast<unsigned long long>(flags.splits.batch), static_cast<unsigned long long>(flags.jobs.sequential),
         static_cast<unsigned long long>(flags.jobs.pipelined),
         static_cast<unsigned long long>(flags.jobs.in_flight));
  printf("%-18s %11s %11s %11s %13s %11s %11s %12s %12s\n", "dispatcher", "split p50us", "split p99us",
         "splits/s", "batched spl/s", "jobs/s seq", "jobs/s pipe", "etcd txn p50", "etcd txn p99");
  for (const DsHaFigures& f : all) {
    printf("%-18s %11.1f %11.1f %11.0f %13.0f %11.0f %11.0f", f.name.c_str(), f.splits.p50_ms * 1000,
           f.splits.p99_ms * 1000, f.splits.single_per_s, f.splits.batched_per_s, f.jobs.sequential_per_s,
           f.jobs.pipelined_per_s);
    if (f.txn.p50_us < 0) {
      printf(" %12s %12s\n", "-", "-");
    } else {
      printf(" %12.1f %12.1f\n", f.txn.p50_us, f.txn.p99_us);
    }
  }
  const DsHaFigures& single = all.front();
  for (size_t i = 1; i < all.size(); ++i) {
    const DsHaFigures& g = all[i];
    const double single_p50 = single.splits.p50_ms * 1000;
    const double bound = single_p50 + 1.5 * g.txn.p50_us;
    printf("%s: getSplit round trip p50 %.1f us vs target <= %.1f (single %.1f + 1.5 x txn p50 %.1f): %s\n",
           g.name.c_str(), g.splits.p50_ms * 1000, bound, single_p50, g.txn.p50_us,
           Verdict(g.splits.p50_ms * 1000 <= bound));
    printf("%s: pipelined getOrCreateJob calls/s %.0f vs target >= %.0f (50%% of single): %s\n",
           g.name.c_str(), g.jobs.pipelined_per_s, 0.5 * single.jobs.pipelined_per_s,
           Verdict(g.jobs.pipelined_per_s >= 0.5 * single.jobs.pipelined_per_s));
  }
  return 0;
}

}  // namespace

DISPATCH_BENCH("dataservice-ha",
               "getSplit and job creation: single node beside HA dispatchers on etcd groups", RunDataServiceHa);

}  // namespace dispatch::bench
