#include "bench/ha_bench_support.h"

#include <cstdio>
#include <sstream>
#include <utility>
#include <stdexcept>
#include <vector>

#include "reactor/histogram.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/http_get.h"
#include "tests/support/wait_until.h"

namespace dispatch::bench {
namespace {

// The p50/p99 of one Prometheus histogram in a /metrics text.
void HistogramQuantiles(const std::string& metrics, const std::string& name, TxnQuantiles& out) {
  std::vector<double> bounds;
  std::vector<uint64_t> cumulative;
  uint64_t count = 0;
  std::istringstream lines(metrics);
  std::string line;
  const std::string bucket = name + "_bucket{le=\"";
  while (std::getline(lines, line)) {
    if (line.rfind(bucket, 0) == 0) {
      const size_t end = line.find('"', bucket.size());
      const std::string le = line.substr(bucket.size(), end - bucket.size());
      const uint64_t n = std::stoull(line.substr(line.rfind(' ') + 1));
      if (le == "+Inf") {
        count = n;
      } else {
        bounds.push_back(std::stod(le));
        cumulative.push_back(n);
      }
    } else if (line.rfind(name + "_count ", 0) == 0) {
      count = std::stoull(line.substr(line.rfind(' ') + 1));
    }
  }
  if (bounds.empty() || count == 0) return;
  std::vector<uint64_t> per_bucket;
  uint64_t previous = 0;
  for (uint64_t c : cumulative) {
    per_bucket.push_back(c - previous);
    previous = c;
  }
  per_bucket.push_back(count - previous);
  out.p50_us = reactor::Histogram::Quantile(bounds, per_bucket, 0.5) * 1e6;
  out.p99_us = reactor::Histogram::Quantile(bounds, per_bucket, 0.99) * 1e6;
  out.transactions = count;
}

// The sum and count of one etcd histogram in a /metrics text.
std::pair<double, double> SumAndCount(const std::string& metrics, const std::string& name) {
  std::pair<double, double> out{0, 0};
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "_sum ", 0) == 0) out.first = std::stod(line.substr(name.size() + 5));
    if (line.rfind(name + "_count ", 0) == 0) out.second = std::stod(line.substr(name.size() + 7));
  }
  return out;
}

// The floor under every etcd transaction, measured by etcd in the same run:
// its WAL fsyncs and backend commits, over all members.
void PrintEtcdDisk(const std::string& name, const testing::EtcdCluster& cluster) {
  double fsync_sum = 0, fsyncs = 0, commit_sum = 0, commits = 0;
  for (const std::string& endpoint : cluster.endpoints()) {
    const std::string metrics = testing::HttpGet(endpoint, "/metrics").body;
    auto [f_sum, f_count] = SumAndCount(metrics, "etcd_disk_wal_fsync_duration_seconds");
    auto [c_sum, c_count] = SumAndCount(metrics, "etcd_disk_backend_commit_duration_seconds");
    fsync_sum += f_sum;
    fsyncs += f_count;
    commit_sum += c_sum;
    commits += c_count;
  }
  printf("%s: etcd's disk in this run: WAL fsync mean %.2f ms (%.0f fsyncs), backend commit mean %.2f ms (%.0f)\n",
         name.c_str(), fsyncs > 0 ? fsync_sum / fsyncs * 1e3 : 0.0, fsyncs,
         commits > 0 ? commit_sum / commits * 1e3 : 0.0, commits);
}

}  // namespace

TxnQuantiles ReadTxnQuantiles(const std::string& http_url) {
  TxnQuantiles out;
  testing::HttpResponse metrics = testing::HttpGet(http_url, "/metrics");
  HistogramQuantiles(metrics.body, "dispatch_etcd_journal_transaction_seconds", out);
  const double bytes = testing::MetricSample(metrics.body, "dispatch_etcd_journal_bytes_total");
  if (bytes > 0) out.bytes = static_cast<uint64_t>(bytes);
  return out;
}

std::unique_ptr<testing::DispatcherProcess> StartReadyDispatcher(const std::string& name,
                                                                 const std::string& etcd) {
  testing::DispatcherProcess::Options options;
  if (!etcd.empty()) options.extra_flags = {"--etcd=" + etcd, "--ha-prefix=/bench"};
  auto dispatcher = std::make_unique<testing::DispatcherProcess>(options);
  if (!testing::WaitUntil([&] {
        return testing::HttpGet(dispatcher->http_url(), "/readyz", "", std::chrono::seconds(5)).status == 200;
      })) {
    throw std::runtime_error(name + ": the dispatcher never became ready");
  }
  return dispatcher;
}

void ForEachSetup(const std::string& members,
                  const std::function<void(const std::string& name, const std::string& etcd)>& measure) {
  measure("single node", "");
  std::stringstream list(members);
  std::string item;
  while (std::getline(list, item, ',')) {
    testing::EtcdClusterOptions options;
    options.members = std::stoi(item);
    testing::EtcdCluster cluster(options);
    if (!cluster.Start()) throw std::runtime_error("etcd: " + cluster.error());
    const std::string name = "etcd, " + item + (item == "1" ? " member" : " members");
    measure(name, cluster.EndpointList());
    PrintEtcdDisk(name, cluster);
  }
}

}  // namespace dispatch::bench
