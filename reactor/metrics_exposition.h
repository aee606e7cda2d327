// The dispatcher's /metrics: every counter, gauge and histogram the loop
// keeps, as Prometheus text exposition (format 0.0.4) written by
// prometheus-cpp's TextSerializer. The counters stay plain integers owned by
// the loop; this builds the families from them at scrape time, in time that
// does not grow with the state (sizes are read, not counted). The metric
// names are listed in README.md ("Metrics").
// REQUIRES: loop thread.
#pragma once

#include <string>

namespace dispatch::reactor {

class DispatcherServer;

std::string RenderMetrics(DispatcherServer& server);

// The process's resident set size in bytes (/proc/self/statm); 0 if unknown.
uint64_t ResidentBytes();

}  // namespace dispatch::reactor
