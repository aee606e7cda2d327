#include "bench/ha_bench_support.h"

#include <sstream>
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

}  // namespace

TxnQuantiles ReadTxnQuantiles(const std::string& http_url) {
  TxnQuantiles out;
  testing::HttpResponse metrics = testing::HttpGet(http_url, "/metrics");
  HistogramQuantiles(metrics.body, "dispatch_etcd_journal_transaction_seconds", out);
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
    measure("etcd, " + item + (item == "1" ? " member" : " members"), cluster.EndpointList());
  }
}

}  // namespace dispatch::bench
