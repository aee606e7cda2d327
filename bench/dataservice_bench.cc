// `dispatch-bench dataservice`: the data service under load against the real
// `dispatcher` binary (--synchronous=full, the default), one table:
//  1. N simulated workers heartbeating at 1 Hz, each worker's heartbeats
//     spread evenly over the second: sustained heartbeats/s, lateness of the
//     replies (reply time minus the scheduled send time) and the dispatcher's
//     CPU time (utime+stime from /proc/PID/stat) per heartbeat. The workers
//     share a few connections (the dispatcher allows several per connection)
//     and run on this process's own libuv loop. The floor is the same load
//     against dispatch-baseline-server, which answers each heartbeat with no
//     tasks on Cap'n Proto's own loop: what the RPC system alone costs.
//  2. getSplit on a DYNAMIC job over an indexed split source with one task:
//     single splits sequentially, then batches of --batch.
//  3. Anonymous getOrCreateJob calls, sequential and pipelined.
// Each part runs against a fresh dispatcher. Benchmarks report, never assert.
#include <kj/async.h>
#include <kj/vector.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/baseline_process.h"
#include "bench/dataservice_calls.h"
#include "bench/latency.h"
#include "bench/registry.h"
#include "bench/sim_workers.h"
#include "bench/summary.h"
#include "common/flag_parser.h"
#include "schema/dispatcher.capnp.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ClientLoop;
using testing::DispatcherProcess;

struct DsFlags {
  std::string workers = "100,1000,10000";
  uint64_t heartbeat_seconds = 10;
  uint64_t warmup_seconds = 2;
  uint64_t idle_ms = 2000;
  uint64_t workers_per_connection = 100;
  SplitRun splits;
  JobRun jobs;
  bool quick = false;
  bool floor = true;
};

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// utime + stime of `pid`, in seconds.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name, which is in parentheses and may hold spaces.
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

class CountingErrors final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&& e) override {
    if (errors++ == 0) fprintf(stderr, "first failed call: %s\n", e.getDescription().cStr());
  }
  uint64_t errors = 0;
};

struct HeartbeatFigures {
  uint64_t workers = 0, connections = 0, heartbeats = 0, errors = 0;
  double register_s = 0, per_s = 0, p50_ms = 0, p99_ms = 0, max_ms = 0, cpu_us = 0;
  double idle_ms_per_s = 0, net_cpu_us = 0, bench_cpu_us = 0;
};

// `baseline`: against dispatch-baseline-server (the floor), else the dispatcher.
HeartbeatFigures MeasureHeartbeats(uint64_t n, const DsFlags& flags, bool baseline) {
  HeartbeatFigures f;
  f.workers = n;
  f.connections = (n + flags.workers_per_connection - 1) / flags.workers_per_connection;
  std::unique_ptr<DispatcherProcess> dispatcher;
  std::unique_ptr<testing::Subprocess> baseline_process;
  std::string address;
  pid_t pid = -1;
  if (baseline) {
    baseline_process = StartBaseline(&address);
    pid = baseline_process->pid();
  } else {
    DispatcherProcess::Options options;
    // Every simulated connection comes from 127.0.0.1: lift the per-address
    // limit with the total one.
    options.extra_flags = {"--max-connections=" + std::to_string(f.connections + 64),
                           "--max-connections-per-address=" + std::to_string(f.connections + 64)};
    dispatcher = std::make_unique<DispatcherProcess>(options);
    address = dispatcher->address();
    pid = dispatcher->process().pid();
  }
  ClientLoop loop;
  std::vector<SimConnection> conns(f.connections);
  for (auto& c : conns) c.conn = loop.Connect(address);
  // The server's CPU with nobody calling (timers), to tell apart from the
  // cost of the heartbeats themselves.
  {
    double before = ProcessCpuSeconds(pid);
    auto idle_start = Clock::now();
    loop.io().timer().afterDelay(flags.idle_ms * kj::MILLISECONDS).wait(loop.wait_scope());
    f.idle_ms_per_s = (ProcessCpuSeconds(pid) - before) * 1000 / SecondsSince(idle_start);
  }
  auto conn_of = [&](uint64_t w) -> SimConnection& { return conns[w % f.connections]; };

  // Registration: every worker's first heartbeat, `in_flight` at a time.
  CountingErrors errors;
  auto start = Clock::now();
  {
    uint64_t next = 0;
    std::function<kj::Promise<void>()> chain = [&]() -> kj::Promise<void> {
      if (next >= n) return kj::READY_NOW;
      uint64_t w = next++;
      return SendSimHeartbeat(conn_of(w), w).then([&]() { return chain(); });
    };
    kj::Vector<kj::Promise<void>> chains;
    for (uint64_t i = 0; i < flags.jobs.in_flight * 4; ++i) chains.add(chain());
    loop.Wait(kj::joinPromises(chains.releaseAsArray()), 600 * kj::SECONDS);
  }
  f.register_s = SecondsSince(start);

  // Steady state: the k-th heartbeat overall is due at start + k/n seconds
  // and comes from worker k % n, so each worker beats once a second, evenly
  // spread. Heartbeats sent during the warmup are not counted.
  LatencySamples lateness;
  lateness.Reserve(n * flags.heartbeat_seconds + 16);
  uint64_t replies = 0;
  bool measuring = false;
  kj::TaskSet tasks(errors);
  const auto period = std::chrono::nanoseconds(1000000000ull / n);
  start = Clock::now();
  const auto measure_from = start + std::chrono::seconds(flags.warmup_seconds);
  const auto end = measure_from + std::chrono::seconds(flags.heartbeat_seconds);
  uint64_t k = 0;
  double cpu_before = 0, bench_before = 0;
  auto window_start = measure_from;
  while (true) {
    auto now = Clock::now();
    if (!measuring && now >= measure_from) {
      measuring = true;
      window_start = now;
      cpu_before = ProcessCpuSeconds(pid);
      bench_before = ProcessCpuSeconds(getpid());
    }
    if (now >= end) break;
    for (auto due = start + k * period; due <= now && due < end; due = start + (++k) * period) {
      bool counted = due >= measure_from;
      tasks.add(SendSimHeartbeat(conn_of(k % n), k % n).then([&, due, counted]() {
        if (!counted) return;
        ++replies;
        lateness.Add(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - due).count());
      }));
    }
    loop.io().timer().afterDelay(1 * kj::MILLISECONDS).wait(loop.wait_scope());
  }
  // The heartbeats due in the window are counted when answered, even late.
  loop.Wait(tasks.onEmpty(), 60 * kj::SECONDS);
  double window = SecondsSince(window_start);
  double cpu = ProcessCpuSeconds(pid) - cpu_before;
  double bench_cpu = ProcessCpuSeconds(getpid()) - bench_before;
  f.heartbeats = replies;
  f.errors = errors.errors;
  f.per_s = replies / window;
  if (lateness.count() > 0) {
    f.p50_ms = lateness.PercentileMicros(50) / 1000;
    f.p99_ms = lateness.PercentileMicros(99) / 1000;
    f.max_ms = lateness.PercentileMicros(100) / 1000;
  }
  if (replies > 0) {
    f.cpu_us = cpu * 1e6 / replies;
    f.net_cpu_us = std::max(0.0, cpu - f.idle_ms_per_s / 1000 * window) * 1e6 / replies;
    f.bench_cpu_us = bench_cpu * 1e6 / replies;
  }
  return f;
}


std::vector<uint64_t> ParseList(const std::string& text) {
  std::vector<uint64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) values.push_back(std::stoull(item));
  }
  return values;
}

const char* Verdict(bool met) { return met ? "met" : "NOT met"; }

int RunDataServiceBench(int argc, char** argv) {
  DsFlags flags;
  FlagParser parser("dispatch-bench dataservice",
                    "Worker heartbeats at 1 Hz, getSplit and job creation against the real "
                    "dispatcher (--synchronous=full).");
  parser.AddString("workers", "N,N,...", "simulated worker counts, one heartbeat run each",
                   &flags.workers);
  parser.AddUint("heartbeat-seconds", "measured seconds per heartbeat run",
                 &flags.heartbeat_seconds, 1, 3600);
  parser.AddUint("warmup-seconds", "heartbeat seconds before measuring", &flags.warmup_seconds, 0,
                 600);
  parser.AddUint("idle-ms", "dispatcher idle CPU measured over this long before each heartbeat run",
                 &flags.idle_ms, 100, 600000);
  parser.AddUint("workers-per-connection", "simulated workers sharing one connection",
                 &flags.workers_per_connection, 1, 1000000);
  DeclareSplitAndJobFlags(parser, flags.splits, flags.jobs);
  parser.AddBool("floor",
                 "also run each heartbeat load against dispatch-baseline-server (bare Cap'n "
                 "Proto) for the CPU floor",
                 &flags.floor);
  parser.AddBool("quick",
                 "short runs (under a minute in all): 3 s per heartbeat run, 1 s "
                 "warmup, fewer calls",
                 &flags.quick);
  ParseFlagsOrExit(parser, argc, argv);
  if (flags.quick) {
    flags.heartbeat_seconds = 3;
    flags.warmup_seconds = 1;
    flags.idle_ms = 1000;
    flags.splits.single_splits = std::min<uint64_t>(flags.splits.single_splits, 2000);
    flags.splits.batched_calls = std::min<uint64_t>(flags.splits.batched_calls, 100);
    flags.jobs.sequential = std::min<uint64_t>(flags.jobs.sequential, 500);
    flags.jobs.pipelined = std::min<uint64_t>(flags.jobs.pipelined, 4000);
  }
  std::vector<uint64_t> counts = ParseList(flags.workers);

  std::vector<HeartbeatFigures> heartbeats, floors;
  for (uint64_t n : counts) {
    if (n == 0) continue;
    heartbeats.push_back(MeasureHeartbeats(n, flags, false));
    const auto& h = heartbeats.back();
    fprintf(stderr, "heartbeats: %llu workers registered in %.1f s, %.0f/s sustained\n",
            static_cast<unsigned long long>(n), h.register_s, h.per_s);
    if (flags.floor) {
      floors.push_back(MeasureHeartbeats(n, flags, true));
      fprintf(stderr, "heartbeats: baseline at %.0f/s sustained\n", floors.back().per_s);
    }
  }
  SplitFigures splits;
  {
    DispatcherProcess dispatcher;
    splits = MeasureSplits(dispatcher.address(), flags.splits);
  }
  fprintf(stderr, "getSplit: done\n");
  JobFigures jobs;
  {
    DispatcherProcess dispatcher;
    jobs = MeasureJobs(dispatcher.address(), flags.jobs);
  }

  printf(
      "\ndataservice: dispatcher --synchronous=full; %llu s heartbeat windows (+%llu s warmup), "
      "%llu workers per connection; CPU from /proc in %ld ticks/s\n",
      static_cast<unsigned long long>(flags.heartbeat_seconds),
      static_cast<unsigned long long>(flags.warmup_seconds),
      static_cast<unsigned long long>(flags.workers_per_connection), sysconf(_SC_CLK_TCK));
  printf("%-44s %14s  %s\n", "figure", "measured", "target");
  for (size_t i = 0; i < heartbeats.size(); ++i) {
    const auto& h = heartbeats[i];
    const HeartbeatFigures* floor = i < floors.size() ? &floors[i] : nullptr;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "hb %llu workers:", static_cast<unsigned long long>(h.workers));
    std::string p = prefix;
    bool sustained = h.per_s >= 0.99 * h.workers && h.errors == 0;
    printf("%-44s %14.1f  %s\n", (p + " registration (s)").c_str(), h.register_s, "-");
    printf("%-44s %14.0f  >= %llu (%s)\n", (p + " heartbeats/s sustained").c_str(), h.per_s,
           static_cast<unsigned long long>(h.workers), Verdict(sustained));
    printf("%-44s %14.2f\n", (p + " lateness p50 (ms)").c_str(), h.p50_ms);
    printf("%-44s %14.2f\n", (p + " lateness p99 (ms)").c_str(), h.p99_ms);
    printf("%-44s %14.2f  <= 100 (%s)\n", (p + " lateness max (ms)").c_str(), h.max_ms,
           Verdict(h.max_ms <= 100));
    printf("%-44s %14.1f  < 40 (%s)\n", (p + " dispatcher CPU/heartbeat (us)").c_str(), h.cpu_us,
           Verdict(h.cpu_us < 40));
    if (floor != nullptr) {
      printf("%-44s %14.1f  (%.0f/s sustained)\n", (p + " floor CPU/heartbeat (us)").c_str(),
             floor->cpu_us, floor->per_s);
      if (floor->cpu_us > 0)
        printf("%-44s %14.2f\n", (p + " ratio to the floor").c_str(), h.cpu_us / floor->cpu_us);
    }
    if (h.workers >= 10000) {
      Figure figure;
      figure.figure = "CPU per heartbeat, " + std::to_string(h.workers) + " workers (us)";
      figure.value = h.cpu_us;
      if (floor != nullptr) figure.floor = floor->cpu_us;
      figure.target = 20;
      figure.target_text = "<= 20 us";
      ReportFigure(figure);
    }
    printf("%-44s %14.1f  < 40 (%s)\n", (p + " ... net of idle CPU (us)").c_str(), h.net_cpu_us,
           Verdict(h.net_cpu_us < 40));
    printf("%-44s %14.1f\n", (p + " dispatcher idle CPU (ms/s)").c_str(), h.idle_ms_per_s);
    printf("%-44s %14.1f\n", (p + " bench CPU/heartbeat (us)").c_str(), h.bench_cpu_us);
    if (h.errors > 0)
      printf("%-44s %14llu\n", (p + " failed heartbeats").c_str(),
             static_cast<unsigned long long>(h.errors));
  }
  bool has_10k = false;
  for (const auto& h : heartbeats) has_10k = has_10k || h.workers >= 10000;
  if (!has_10k) printf("%-44s %14s  10,000 workers (not run)\n", "hb target", "-");
  printf("%-44s %14.3f\n", "getSplit single p50 (ms)", splits.p50_ms);
  printf("%-44s %14.3f  < 5 (%s)\n", "getSplit single p99 (ms)", splits.p99_ms,
         Verdict(splits.p99_ms < 5));
  printf("%-44s %14.0f\n", "getSplit single splits/s", splits.single_per_s);
  char batch_name[64];
  snprintf(batch_name, sizeof batch_name, "getSplit batched (max %llu) splits/s",
           static_cast<unsigned long long>(flags.splits.batch));
  printf("%-44s %14.0f  >= 100000 (%s)\n", batch_name, splits.batched_per_s,
         Verdict(splits.batched_per_s >= 100000));
  printf("%-44s %14.3f\n", "getSplit batched call p50 (ms)", splits.batched_call_p50_ms);
  printf("%-44s %14.0f\n", "getOrCreateJob sequential calls/s", jobs.sequential_per_s);
  char jobs_name[64];
  snprintf(jobs_name, sizeof jobs_name, "getOrCreateJob pipelined (%llu) calls/s",
           static_cast<unsigned long long>(flags.jobs.in_flight));
  printf("%-44s %14.0f\n", jobs_name, jobs.pipelined_per_s);
  return 0;
}

DISPATCH_BENCH("dataservice", "worker heartbeats at 1 Hz, getSplit and job creation (FULL)",
               RunDataServiceBench);

}  // namespace
}  // namespace dispatch::bench
