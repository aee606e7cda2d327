// The dispatcher's /metrics: every counter, gauge and histogram the loop
// keeps, as Prometheus text exposition (format 0.0.4) written by
// prometheus-cpp's TextSerializer. The counters stay plain integers owned by
// the loop; CollectMetrics copies them into metric families at scrape time
// (on the loop, in time that does not grow with the state: sizes are read,
// not counted), and SerializeMetrics formats that copy (anywhere: the
// dispatcher runs it on the thread pool). RPC methods never called are left
// out. The metric names are listed in docs/operators/metrics.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

namespace dispatch::reactor {

class DispatcherServer;

// REQUIRES: loop thread.
std::vector<prometheus::MetricFamily> CollectMetrics(DispatcherServer& server);
// Any thread.
std::string SerializeMetrics(const std::vector<prometheus::MetricFamily>& families);

// The process's resident set size in bytes (/proc/self/statm); 0 if unknown.
uint64_t ResidentBytes();

}  // namespace dispatch::reactor
