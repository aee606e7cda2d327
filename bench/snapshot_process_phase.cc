// A phase of `dispatch-bench snapshot` with the real dispatcher binary: its
// counters come from /metrics, its peak RSS and its loop thread's involuntary
// context switches from /proc, and its snapshots' times from the "snapshot at
// record ... recorded" lines of its JSON log (whose wall-clock times are
// mapped onto the pings' monotonic clock).
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "bench/latency.h"
#include "bench/process_cpu.h"
#include "bench/snapshot_phase.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/http_get.h"
#include "tests/support/temp_dir.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A sample of `page` whose line starts with `name` (labels included); 0 when
// absent.
uint64_t Sample(const std::string& page, const std::string& name) {
  const double value = testing::MetricSample(page, name);
  return value < 0 ? 0 : static_cast<uint64_t>(value);
}

// Observations of histogram `name` above `le` (one of its bounds, as printed).
uint64_t CountAbove(const std::string& page, const std::string& name, const char* le) {
  return Sample(page, name + "_count") - Sample(page, name + "_bucket{le=\"" + le + "\"}");
}

// CLOCK_REALTIME less CLOCK_MONOTONIC, in nanoseconds.
int64_t RealtimeOffsetNs() {
  timespec real, mono;
  clock_gettime(CLOCK_REALTIME, &real);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  return (static_cast<int64_t>(real.tv_sec) - mono.tv_sec) * 1000000000ll +
         (static_cast<int64_t>(real.tv_nsec) - mono.tv_nsec);
}

// `"time":"2026-12-06T08:52:15.440Z"` in a JSON log line, as CLOCK_REALTIME
// nanoseconds; 0 if the line has none.
int64_t LineTimeNs(const std::string& line) {
  const size_t at = line.find("\"time\":\"");
  if (at == std::string::npos) return 0;
  tm t{};
  int ms = 0;
  if (sscanf(line.c_str() + at + 8, "%d-%d-%dT%d:%d:%d.%dZ", &t.tm_year, &t.tm_mon, &t.tm_mday,
             &t.tm_hour, &t.tm_min, &t.tm_sec, &ms) != 7) {
    return 0;
  }
  t.tm_year -= 1900;
  t.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&t)) * 1000000000ll + ms * 1000000ll;
}

// The number after `key` in `line`; 0 if absent.
uint64_t NumberAfter(const std::string& line, const char* key) {
  const size_t at = line.find(key);
  return at == std::string::npos ? 0 : strtoull(line.c_str() + at + strlen(key), nullptr, 10);
}

// The snapshots the dispatcher logged. The log gives each one's end to the
// millisecond and its total duration in whole milliseconds, so each interval
// is widened by a millisecond on either side. Those that began after
// `until_ns` (the one a clean stop writes) are not the phase's.
void ReadSnapshots(const std::string& log_path, uint64_t until_ns, PhaseResult& result) {
  const int64_t offset = RealtimeOffsetNs();
  std::ifstream log(log_path);
  for (std::string line; std::getline(log, line);) {
    reactor::SnapshotOutcome s;
    if (line.find("\"message\":\"snapshot at record ") == std::string::npos) continue;
    const int64_t logged = LineTimeNs(line) - offset;
    if (line.find(" recorded: ") != std::string::npos) {
      s.info.seq = NumberAfter(line, "snapshot at record ");
      s.info.size = NumberAfter(line, " recorded: ");
      s.records_applied = NumberAfter(line, "caught up ");
      s.catch_up_micros = NumberAfter(line, " records in ") * 1000;
      s.write_micros = NumberAfter(line, "encoded and wrote in ") * 1000;
      s.total_micros = NumberAfter(line, ", total ") * 1000 + 2000;
      s.started_ns = static_cast<uint64_t>(logged + 1000000) - s.total_micros * 1000;
    } else if (line.find(" failed ") != std::string::npos) {
      s.status = InternalError("logged as failed");
      s.started_ns = static_cast<uint64_t>(logged);
    } else {
      continue;
    }
    if (s.started_ns <= until_ns) result.snapshots.push_back(s);
  }
}

}  // namespace

PhaseResult RunPhaseInProcess(const std::string& dir, const SnapshotFlags& flags,
                              uint64_t snapshot_every, bool background) {
  PhaseResult result;
  testing::TempDir logs;
  testing::DispatcherProcess::Options options;
  options.work_dir = dir;
  options.stderr_path = logs.path() + "/dispatcher.log";
  // The built state's workers never connect and its jobs have no clients:
  // keep them for the whole run.
  options.extra_flags = {
      "--log-level=info",
      "--log-format=json",
      "--snapshot-every=" + std::to_string(snapshot_every),
      std::string("--snapshot-in-background=") + (background ? "true" : "false"),
      std::string("--synchronous=") + (flags.synchronous_full ? "full" : "normal"),
      "--worker-timeout-ms=86400000",
      "--client-timeout-ms=86400000",
      "--job-gc-check-interval-ms=0",
  };
  std::istringstream extra(flags.dispatcher_flags);
  for (std::string flag; extra >> flag;) options.extra_flags.push_back(flag);
  const auto start = Clock::now();
  testing::DispatcherProcess dispatcher(options);
  result.startup_s = std::chrono::duration<double>(Clock::now() - start).count();
  // The loop runs on the dispatcher's main thread, whose task id is its pid.
  const std::string pid = std::to_string(dispatcher.process().pid());
  const std::string loop_status = "/proc/" + pid + "/task/" + pid + "/status";
  const long preemptions_before = ProcStatusField(loop_status, "nonvoluntary_ctxt_switches");

  DriveLoad(dispatcher.address().substr(strlen("tcp:")), flags, result);
  const uint64_t phase_end_ns = MonotonicNs();

  const std::string page = testing::HttpGet(dispatcher.http_url(), "/metrics").body;
  if (page.empty()) throw std::runtime_error("no /metrics from the dispatcher");
  result.commits = Sample(page, "dispatch_journal_commit_seconds_count");
  result.commits_over_5ms = CountAbove(page, "dispatch_journal_commit_seconds", "0.005");
  result.commits_over_25ms = CountAbove(page, "dispatch_journal_commit_seconds", "0.025");
  result.passes = Sample(page, "dispatch_loop_pass_busy_seconds_count");
  result.passes_over_5ms = CountAbove(page, "dispatch_loop_pass_busy_seconds", "0.005");
  result.passes_over_10ms = CountAbove(page, "dispatch_loop_pass_busy_seconds", "0.01");
  result.longest_pass_us = static_cast<uint64_t>(
      testing::MetricSample(page, "dispatch_loop_pass_busy_max_seconds") * 1e6);
  result.wal_restarts_pool = Sample(page, "dispatch_wal_restarts_total{thread=\"pool\"}");
  result.wal_restarts_loop = Sample(page, "dispatch_wal_restarts_total{thread=\"loop\"}");
  result.loop_preemptions =
      ProcStatusField(loop_status, "nonvoluntary_ctxt_switches") - preemptions_before;
  result.max_rss_kb = ProcStatusField("/proc/" + pid + "/status", "VmHWM");
  if (!dispatcher.Terminate(std::chrono::minutes(5))) {
    throw std::runtime_error("the dispatcher did not stop within 5 minutes of SIGTERM");
  }
  ReadSnapshots(options.stderr_path, phase_end_ns, result);
  return result;
}

}  // namespace dispatch::bench
