// The dispatcher's /metrics: every counter, gauge and histogram the loop
// keeps, as Prometheus text exposition (format 0.0.4) written by
// prometheus-cpp's TextSerializer. The counters stay plain integers owned by
// the loop; CollectMetrics copies them into metric families at scrape time
// (on the loop, in time that does not grow with the state: sizes are read,
// not counted), and SerializeMetrics formats that copy (anywhere: the
// dispatcher runs it on the thread pool). RPC methods never called are left
// out. Whoever serves behind the Frontend may add families of its own
// (MetricsExtra: an HA member's). The metric names are listed in
// docs/operators/metrics.md.
#pragma once

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "reactor/histogram.h"

namespace dispatch::reactor {

class DispatcherServer;
class Frontend;

// Families in the order first named; a name seen again adds a series.
class MetricFamilies {
 public:
  using Labels = std::vector<prometheus::ClientMetric::Label>;

  void Counter(const std::string& name, const std::string& help, double value, Labels labels = {}) {
    Add(name, help, prometheus::MetricType::Counter).counter.value = value;
    families_[index_[name]].metric.back().label = std::move(labels);
  }
  void Gauge(const std::string& name, const std::string& help, double value, Labels labels = {}) {
    Add(name, help, prometheus::MetricType::Gauge).gauge.value = value;
    families_[index_[name]].metric.back().label = std::move(labels);
  }
  void Histo(const std::string& name, const std::string& help, const Histogram& h,
             Labels labels = {}) {
    prometheus::ClientMetric& m = Add(name, help, prometheus::MetricType::Histogram);
    m.label = std::move(labels);
    m.histogram.sample_count = h.count();
    m.histogram.sample_sum = h.sum();
    uint64_t cumulative = 0;
    const auto& bounds = h.upper_bounds();
    const auto& counts = h.bucket_counts();
    for (size_t i = 0; i < counts.size(); ++i) {
      cumulative += counts[i];
      prometheus::ClientMetric::Bucket bucket;
      bucket.cumulative_count = cumulative;
      bucket.upper_bound = i < bounds.size() ? bounds[i] : std::numeric_limits<double>::infinity();
      m.histogram.bucket.push_back(bucket);
    }
  }
  std::vector<prometheus::MetricFamily> Release() { return std::move(families_); }

 private:
  prometheus::ClientMetric& Add(const std::string& name, const std::string& help,
                                prometheus::MetricType type) {
    auto [it, inserted] = index_.try_emplace(name, families_.size());
    if (inserted) {
      prometheus::MetricFamily family;
      family.name = name;
      family.help = help;
      family.type = type;
      families_.push_back(std::move(family));
    }
    return families_[it->second].metric.emplace_back();
  }

  std::vector<prometheus::MetricFamily> families_;
  std::map<std::string, size_t> index_;
};

// Families an embedder adds, after the journal's and before the loop's.
using MetricsExtra = std::function<void(MetricFamilies&)>;

// Everything a serving dispatcher shows. REQUIRES: loop thread.
std::vector<prometheus::MetricFamily> CollectMetrics(DispatcherServer& server);
// What the front alone shows (the process, RPC, the loop, HTTP), with
// `extra` where a server's journal would be. REQUIRES: loop thread.
std::vector<prometheus::MetricFamily> CollectFrontMetrics(Frontend& front,
                                                          const MetricsExtra& extra);
// Any thread.
std::string SerializeMetrics(const std::vector<prometheus::MetricFamily>& families);

// The process's resident set size in bytes (/proc/self/statm); 0 if unknown.
uint64_t ResidentBytes();

}  // namespace dispatch::reactor
