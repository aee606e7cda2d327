// `dispatch-bench snapshot`: ping latency while snapshots of a big state run.
// Builds a state of N entities (datasets, jobs, tasks, closures; by default
// 1,000,000) through DurableState with a snapshot of it, then runs a
// dispatcher three times on that work dir (by default the real binary, a
// process of its own; --dispatcher=thread runs it on a thread of this
// process), each time with a writer journaling at a steady rate (so
// snapshots come due) and a pinger at 1 kHz:
//   floor        --snapshot-every=0: no snapshot at all
//   background   snapshots written by the snapshot replica on the thread pool
//   inline       snapshots written on the loop thread (before issue 12)
// Latency is measured from each ping's scheduled send time, so a stalled
// loop counts against every ping it delayed (no coordinated omission). Pings
// are "during a snapshot" when their [scheduled, reply] overlaps a snapshot's
// [start, recorded]. It also prints the dispatcher's slow commits (its
// commit_seconds histogram: a commit runs on the loop thread, so one over
// 5 ms is a stall the dispatcher made itself), its loop passes, and the runs
// of the VM kernel's kdamond thread, which hold a vCPU for up to ~30 ms
// every ~0.5 s (bench/kernel_thread_probe.h), with the figures of the pings
// none of them overlapped. Reports; asserts nothing.
// With SNAPSHOT_BENCH_TRACE set it also prints each snapshot's times, every
// kdamond run and every ping slower than 5 ms, with its CLOCK_MONOTONIC send
// time to line up with `perf sched record -k CLOCK_MONOTONIC`.
#include <stdio.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <capnp/ez-rpc.h>

#include "bench/latency.h"
#include "bench/ping_probe.h"
#include "bench/snapshot_phase.h"
#include "bench/summary.h"
#include "bench/registry.h"
#include "common/flag_parser.h"
#include "common/log.h"
#include "reactor/dispatcher_server.h"
#include "reactor/durable_state.h"
#include "reactor/loop_pass_meter.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "schema/dispatcher.capnp.h"
#include "storage/store.h"
#include "tests/state/update_builders.h"
#include "tests/support/temp_dir.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace builders = state::testing;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void Fail(const std::string& what, const Status& status) {
  fprintf(stderr, "dispatch-bench snapshot: %s: %s\n", what.c_str(), status.ToString().c_str());
  exit(1);
}

// Journals N entities as real Updates (batched where the journal allows) and
// writes a snapshot of them, so each dispatcher start loads instead of replays.
void BuildState(const std::string& dir, uint64_t entities) {
  uvkj::UvLoop loop;
  storage::StoreOptions store_options;
  store_options.work_dir = dir;
  store_options.synchronous = storage::Synchronous::kNormal;
  store_options.max_snapshot_bytes = 2048u << 20;
  auto store = storage::Store::Open(store_options);
  if (!store.ok()) Fail("open", store.status());
  auto durable = reactor::DurableState::Recover(loop.get(), **store, {.snapshot_every = 0});
  if (!durable.ok()) Fail("recover", durable.status());
  reactor::DurableState& d = **durable;
  uint64_t pending = 0;
  auto submit = [&](builders::OwnedUpdate update) {
    Status status = d.pipeline().Submit(update.reader());
    if (!status.ok()) Fail("building the state", status);
    if (++pending == 4096) {
      d.CommitNow();
      pending = 0;
    }
  };
  // 30% datasets, 20% jobs, 30% tasks (two per job on two workers), 20% closures.
  const uint64_t datasets = entities * 3 / 10, jobs = entities / 5, closures = entities / 5;
  const uint64_t tasks = entities - datasets - jobs - closures;
  submit(builders::RegisterWorker(1, "worker-a:1", "tcp:127.0.0.1:1"));
  submit(builders::RegisterWorker(2, "worker-b:1", "tcp:127.0.0.1:2"));
  for (uint64_t i = 1; i <= datasets; ++i) {
    submit(builders::RegisterDataset(i, 0x9E3779B97F4A7C15ull * i, "", "metadata-" + std::to_string(i)));
  }
  for (uint64_t i = 1; i <= jobs; ++i) submit(builders::CreateJob(i, 1 + (i - 1) % datasets));
  for (uint64_t i = 1; i <= tasks; ++i) {
    submit(builders::CreateTask(i, 1 + (i - 1) / 2 % jobs, i % 2 == 1 ? "worker-a:1" : "worker-b:1"));
  }
  std::vector<uint64_t> ids;
  for (uint64_t i = 1; i <= closures; ++i) {
    ids.push_back(i);
    if (ids.size() == 1000 || i == closures) {
      submit(builders::ScheduleClosures(ids, 7));
      ids.clear();
    }
  }
  d.CommitNow();
  Status snapshot = d.compaction().Snapshot();
  if (!snapshot.ok()) Fail("snapshot", snapshot);
}

capnp::Data::Reader AsData(const std::string& bytes) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size());
}

struct Interval {
  uint64_t start_ns, end_ns;
};


// Values of `histogram` in buckets wholly above `seconds` (one of its bounds).
uint64_t CountAbove(const reactor::Histogram& histogram, double seconds) {
  const auto& bounds = histogram.upper_bounds();
  const auto& counts = histogram.bucket_counts();
  uint64_t n = 0;
  for (size_t i = 1; i < counts.size(); ++i) {
    // Bucket i holds values above bounds[i - 1].
    if (bounds[i - 1] >= seconds) n += counts[i];
  }
  return n;
}

// Involuntary context switches of the calling thread so far.
long ThreadPreemptions() {
  struct rusage usage;
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nivcsw;
}

// One phase: a dispatcher on its own thread, a writer and a pinger on theirs.
PhaseResult RunPhase(const std::string& dir, const SnapshotFlags& flags, uint64_t snapshot_every,
                     bool background) {
  PhaseResult result;
  std::mutex mu;  // guards result.snapshots (written on the loop thread)
  std::promise<std::string> address_promise;
  std::promise<const kj::Executor*> executor_promise;
  reactor::DispatcherServer* server_ptr = nullptr;
  auto start = Clock::now();
  std::thread server_thread([&]() {
    uvkj::UvLoop loop;
    {
      uvkj::UvAsyncIo io(loop.get());
      reactor::DispatcherOptions options;
      options.listen = "tcp:127.0.0.1:0";
      options.work_dir = dir;
      options.synchronous =
          flags.synchronous_full ? storage::Synchronous::kFull : storage::Synchronous::kNormal;
      options.checkpoint_wal_frames = static_cast<int>(flags.checkpoint_wal_frames);
      options.durable.snapshot_every = snapshot_every;
      options.durable.snapshot_in_background = background;
      options.durable.snapshot_retry_ms = 0;
      options.durable.snapshot_observer = [&](const reactor::SnapshotOutcome& outcome) {
        std::lock_guard<std::mutex> lock(mu);
        result.snapshots.push_back(outcome);
      };
      // The built state's workers never connect and its jobs have no
      // clients: keep them for the whole run.
      options.data.worker_timeout_ms = 24 * 3600 * 1000ull;
      options.data.job_gc_check_interval_ms = 0;
      options.data.client_timeout_ms = 24 * 3600 * 1000ull;
      {
        reactor::DispatcherServer server(io, options);
        server_ptr = &server;
        auto bound = server.Start();
        if (!bound.ok()) Fail("start", bound.status());
        executor_promise.set_value(&kj::getCurrentThreadExecutor());
        address_promise.set_value(*bound);
        io.Run();
      }
      io.wait_scope().poll();
    }
    loop.Close();
  });
  const std::string address = address_promise.get_future().get().substr(4);
  const kj::Executor* executor = executor_promise.get_future().get();
  result.startup_s = SecondsSince(start);

  long preemptions_before = 0;
  executor->executeSync([&]() { preemptions_before = ThreadPreemptions(); });
  DriveLoad(address, flags, result);
  executor->executeSync([&]() {
    const reactor::Histogram& commit = server_ptr->durable().pipeline().commit_seconds();
    result.commits = commit.count();
    result.commits_over_5ms = CountAbove(commit, 0.005);
    result.commits_over_25ms = CountAbove(commit, 0.025);
    const reactor::LoopPassMeter& meter = server_ptr->front().loop_passes();
    result.passes = meter.passes();
    result.passes_over_5ms = CountAbove(meter.busy_seconds(), 0.005);
    result.passes_over_10ms = meter.passes_over_10ms();
    result.longest_pass_us = meter.max_busy_ns() / 1000;
    result.wal_restarts_pool = server_ptr->durable().compaction().stats().wal_restarts_off_loop;
    result.wal_restarts_loop = server_ptr->durable().store().wal_restarts_on_loop();
    result.loop_preemptions = ThreadPreemptions() - preemptions_before;
    server_ptr->BeginShutdown("bench phase done");
  });
  server_thread.join();
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  result.max_rss_kb = usage.ru_maxrss;
  return result;
}

bool Overlaps(const PingSample& p, const std::vector<Interval>& intervals) {
  for (const Interval& s : intervals) {
    if (p.scheduled_ns <= s.end_ns && p.done_ns >= s.start_ns) return true;
  }
  return false;
}

// The pings that overlap `during` (inside) or do not, less those that
// overlap `skip`.
PingFigures Summarize(const std::vector<PingSample>& pings, const std::vector<Interval>& during,
                      bool inside, const std::vector<Interval>& skip = {}) {
  return SummarizePings(pings, [&](const PingSample& p) {
    return !Overlaps(p, skip) && Overlaps(p, during) == inside;
  });
}

void PrintRow(const char* name, const PingFigures& f) {
  printf("  %-34s %8zu %9.3f %9.3f %9.3f %9.3f\n", name, f.pings, f.p50_ms, f.p99_ms, f.p999_ms,
         f.max_ms);
}

// Issue 12's targets for the pings during snapshots, in ms.
constexpr double kP999TargetMs = 5;
constexpr double kMaxTargetMs = 20;

const char* TargetMet(const PingFigures& f) {
  return f.pings > 0 && f.unanswered == 0 && f.p999_ms < kP999TargetMs && f.max_ms < kMaxTargetMs
             ? "met"
             : "NOT met";
}

// One of those targets for `dispatch-bench all`'s summary, beside the floor
// phase's same figure (0: the floor phase did not run).
void ReportPingTarget(const std::string& figure, double value, double floor, double target) {
  Figure f;
  f.figure = figure;
  f.value = value;
  f.floor = floor;
  f.target = target;
  char text[80];
  snprintf(text, sizeof text, "< %g ms (floor: the same pings with no snapshots)", target);
  f.target_text = text;
  ReportFigure(f);
}

void ReportPingTargets(const std::string& which, const PingFigures& during,
                       const std::optional<PingFigures>& floor) {
  ReportPingTarget("snapshot: ping p99.9 during snapshots" + which + " (ms)", during.p999_ms,
                   floor ? floor->p999_ms : 0, kP999TargetMs);
  ReportPingTarget("snapshot: ping max during snapshots" + which + " (ms)", during.max_ms,
                   floor ? floor->max_ms : 0, kMaxTargetMs);
}

int RunSnapshotBench(int argc, char** argv) {
  SnapshotFlags flags;
  FlagParser parser("dispatch-bench snapshot",
                    "Ping latency at 1 kHz while snapshots of a state of N entities run: no "
                    "snapshots (floor), background (thread pool) and inline (loop thread), one run.");
  parser.AddUint("entities", "datasets + jobs + tasks + closures in the state", &flags.entities,
                 1000, 100000000);
  parser.AddUint("seconds", "length of each phase", &flags.seconds, 1, 3600);
  parser.AddUint("hz", "pings per second", &flags.hz, 1, 100000);
  parser.AddUint("writes-per-s", "journaled writes per second (they make snapshots due)",
                 &flags.writes_per_s, 10, 1000000);
  parser.AddUint("snapshot-every", "--snapshot-every of the snapshot phases", &flags.snapshot_every,
                 1, 1ull << 40);
  parser.AddString("phases", "LIST", "comma-separated: floor, background, inline", &flags.phases);
  parser.AddString("work-dir", "DIR", "where to build the state (default: a temp dir)",
                   &flags.work_dir);
  parser.AddBool("synchronous-full", "the dispatcher's --synchronous=full (false: normal)",
                 &flags.synchronous_full);
  parser.AddUint("checkpoint-wal-frames",
                 "WAL frames that make a checkpoint due (0: the store's default, 2048): smaller "
                 "checkpoints write back less at a time",
                 &flags.checkpoint_wal_frames, 0, 1u << 30);
  parser.AddString("dispatcher", "WHERE",
                   "process: the real dispatcher binary, a process of its own (figures from its "
                   "/metrics and log); thread: in this process, on a thread of its own",
                   &flags.dispatcher);
  parser.AddString("dispatcher-flags", "FLAGS",
                   "--dispatcher=process: more flags for the dispatcher, space-separated (e.g. "
                   "\"--inline-sync-records=0\"); they come last, so they win",
                   &flags.dispatcher_flags);
  ParseFlagsOrExit(parser, argc, argv);
  if (flags.dispatcher != "process" && flags.dispatcher != "thread") {
    fprintf(stderr, "dispatch-bench snapshot: --dispatcher is process or thread\n");
    return 2;
  }
  if (flags.dispatcher == "thread" && !flags.dispatcher_flags.empty()) {
    fprintf(stderr, "dispatch-bench snapshot: --dispatcher-flags needs --dispatcher=process\n");
    return 2;
  }
  if (flags.dispatcher == "process" && flags.checkpoint_wal_frames != 0) {
    fprintf(stderr, "dispatch-bench snapshot: --checkpoint-wal-frames needs --dispatcher=thread\n");
    return 2;
  }
  SetLogLevel(LogLevel::kWarning);

  std::unique_ptr<testing::TempDir> temp;
  std::string dir = flags.work_dir;
  if (dir.empty()) {
    temp = std::make_unique<testing::TempDir>();
    dir = temp->path();
  }
  auto start = Clock::now();
  BuildState(dir, flags.entities);
  printf("\nsnapshot: state of %llu entities built and snapshotted in %.1f s\n",
         static_cast<unsigned long long>(flags.entities), SecondsSince(start));
  printf("dispatcher in %s; %llu s per phase, pings at %llu Hz, %llu writes/s, --snapshot-every=%llu\n",
         flags.dispatcher == "thread" ? "a thread of this process" : "a process of its own",
         static_cast<unsigned long long>(flags.seconds), static_cast<unsigned long long>(flags.hz),
         static_cast<unsigned long long>(flags.writes_per_s),
         static_cast<unsigned long long>(flags.snapshot_every));
  printf("  %-34s %8s %9s %9s %9s %9s\n", "ping latency (ms)", "pings", "p50", "p99", "p99.9", "max");

  // The floor phase's figures (all pings, and those no kdamond run
  // overlapped): the summary judges the background phase against them.
  std::optional<PingFigures> floor_all, floor_no_kdamond;
  for (const char* phase : {"floor", "background", "inline"}) {
    if (flags.phases.find(phase) == std::string::npos) continue;
    const bool floor = std::string(phase) == "floor";
    const bool background = std::string(phase) == "background";
    const uint64_t every = floor ? 0 : flags.snapshot_every;
    PhaseResult r = flags.dispatcher == "thread" ? RunPhase(dir, flags, every, background)
                                                  : RunPhaseInProcess(dir, flags, every, background);
    std::vector<Interval> intervals;
    uint64_t ok = 0, failed = 0, bytes = 0, applied = 0;
    double sum_catch_up_ms = 0, sum_write_ms = 0;
    double max_ms = 0, sum_ms = 0;
    for (const auto& s : r.snapshots) {
      intervals.push_back({s.started_ns, s.started_ns + s.total_micros * 1000});
      if (!s.status.ok()) {
        ++failed;
        continue;
      }
      ++ok;
      bytes = s.info.size;
      applied += s.records_applied;
      sum_catch_up_ms += s.catch_up_micros / 1000.0;
      sum_write_ms += s.write_micros / 1000.0;
      max_ms = std::max(max_ms, s.total_micros / 1000.0);
      sum_ms += s.total_micros / 1000.0;
    }
    if (getenv("SNAPSHOT_BENCH_TRACE") != nullptr && !r.pings.empty()) {
      const uint64_t t0 = r.pings.front().scheduled_ns;
      for (const auto& sn : r.snapshots) {
        fprintf(stderr, "snapshot start %.3f end %.3f catch-up %.1f ms write %.1f ms %s\n",
                (sn.started_ns - t0) / 1e9, (sn.started_ns + sn.total_micros * 1000 - t0) / 1e9,
                sn.catch_up_micros / 1e3, sn.write_micros / 1e3, sn.status.ToString().c_str());
      }
      for (const KernelThreadRun& run : r.kdamond_runs) {
        fprintf(stderr, "kdamond ran %.1f ms within %.3f-%.3f\n", run.ran_ns / 1e6,
                (run.start_ns - t0) / 1e9, (run.end_ns - t0) / 1e9);
      }
      for (const PingSample& p : r.pings) {
        if (p.done_ns > p.scheduled_ns + 5000000) {
          fprintf(stderr, "slow ping at %.3f: %.1f ms (monotonic %.6f s)\n",
                  (p.scheduled_ns - t0) / 1e9, (p.done_ns - p.scheduled_ns) / 1e6,
                  p.scheduled_ns / 1e9);
        }
      }
    }
    printf("%s (dispatcher start %.1f s, %llu writes, peak RSS of the %s %.0f MB):\n", phase,
           r.startup_s, static_cast<unsigned long long>(r.writes),
           flags.dispatcher == "thread" ? "bench process" : "dispatcher", r.max_rss_kb / 1024.0);
    printf("  loop-thread commits: %llu, over 5 ms: %llu, over 25 ms: %llu; WAL restarts: %llu by "
           "the checkpointer, %llu by a loop commit\n",
           static_cast<unsigned long long>(r.commits),
           static_cast<unsigned long long>(r.commits_over_5ms),
           static_cast<unsigned long long>(r.commits_over_25ms),
           static_cast<unsigned long long>(r.wal_restarts_pool),
           static_cast<unsigned long long>(r.wal_restarts_loop));
    printf("  loop passes: %llu, longest %.1f ms, over 5 ms: %llu, over 10 ms: %llu; loop thread "
           "preempted %ld times\n",
           static_cast<unsigned long long>(r.passes), r.longest_pass_us / 1000.0,
           static_cast<unsigned long long>(r.passes_over_5ms),
           static_cast<unsigned long long>(r.passes_over_10ms), r.loop_preemptions);
    std::vector<Interval> kdamond;
    uint64_t longest_kdamond_ns = 0;
    for (const KernelThreadRun& run : r.kdamond_runs) {
      kdamond.push_back({run.start_ns, run.end_ns});
      longest_kdamond_ns = std::max(longest_kdamond_ns, run.ran_ns);
    }
    if (r.kdamond_found) {
      printf("  kdamond (the VM kernel's memory monitor) ran 1 ms or more %zu times, longest %.1f ms; "
             "%zu pings overlapped one\n",
             kdamond.size(), longest_kdamond_ns / 1e6,
             static_cast<size_t>(std::count_if(r.pings.begin(), r.pings.end(), [&](const PingSample& p) {
               return Overlaps(p, kdamond);
             })));
    }
    if (floor) {
      floor_all = Summarize(r.pings, {}, false);
      PrintRow("no snapshots", *floor_all);
      if (r.kdamond_found) {
        floor_no_kdamond = Summarize(r.pings, {}, false, kdamond);
        PrintRow("no snapshots, no kdamond run", *floor_no_kdamond);
      }
      continue;
    }
    const PingFigures during = Summarize(r.pings, intervals, true);
    const PingFigures during_no_kdamond = Summarize(r.pings, intervals, true, kdamond);
    PrintRow("during snapshots", during);
    if (r.kdamond_found) PrintRow("during snapshots, no kdamond run", during_no_kdamond);
    PrintRow("between snapshots", Summarize(r.pings, intervals, false));
    printf("  snapshots: %llu written, %llu failed; size %.1f MB; duration mean %.0f ms, max %.0f ms",
           static_cast<unsigned long long>(ok), static_cast<unsigned long long>(failed), bytes / 1e6,
           ok ? sum_ms / ok : 0.0, max_ms);
    if (background) {
      printf("; per snapshot: replica caught up %.0f records in %.0f ms, encoded+wrote in %.0f ms",
             ok ? static_cast<double>(applied) / ok : 0.0, ok ? sum_catch_up_ms / ok : 0.0,
             ok ? sum_write_ms / ok : 0.0);
    }
    printf("\n");
    if (background) {
      printf("  target p99.9 < %g ms and max < %g ms during snapshots: %s", kP999TargetMs,
             kMaxTargetMs, TargetMet(during));
      if (r.kdamond_found) {
        printf("; for the pings no kdamond run overlapped: %s", TargetMet(during_no_kdamond));
      }
      printf("\n");
      ReportPingTargets("", during, floor_all);
      if (r.kdamond_found) ReportPingTargets(", no kdamond run", during_no_kdamond, floor_no_kdamond);
    }
  }
  return 0;
}

DISPATCH_BENCH("snapshot", "ping latency while snapshots of a 1M-entity state run",
               RunSnapshotBench);

}  // namespace

void DriveLoad(const std::string& address, const SnapshotFlags& flags, PhaseResult& result) {
  std::atomic<bool> stop{false};
  std::thread writer([&]() {
    capnp::EzRpcClient client(address.c_str());
    auto& ws = client.getWaitScope();
    auto dispatcher = client.getMain<rpc::Gateway>().authenticateRequest().send().wait(ws).getDispatcher();
    const uint64_t period_ns = 1000000000ull / std::max<uint64_t>(flags.writes_per_s, 1);
    uint64_t next = MonotonicNs();
    uint64_t i = 0;
    while (!stop.load()) {
      // Ten writes in flight per burst: a steady rate, not a flood.
      kj::Vector<kj::Promise<void>> calls;
      for (int k = 0; k < 10; ++k) {
        auto request = dispatcher.getOrRegisterDatasetRequest();
        const std::string definition = "snapshot-bench-" + std::to_string(MonotonicNs()) + "-" + std::to_string(i++);
        request.setDefinition(AsData(definition));
        calls.add(request.send().ignoreResult());
      }
      kj::joinPromises(calls.releaseAsArray()).wait(ws);
      result.writes += 10;
      next += 10 * period_ns;
      const uint64_t now = MonotonicNs();
      if (next > now) std::this_thread::sleep_for(std::chrono::nanoseconds(next - now));
    }
  });
  {
    KernelThreadProbe kdamond("kdamond");
    PingProbe probe(address, flags.hz);
    std::this_thread::sleep_for(std::chrono::seconds(flags.seconds));
    result.pings = probe.Stop();
    result.kdamond_found = kdamond.found();
    result.kdamond_runs = kdamond.Stop();
  }
  stop = true;
  writer.join();
}

}  // namespace dispatch::bench
