// `dispatch-bench closures`: closure coordination end to end against the real
// `dispatcher` (--synchronous=full, the default) and real `dispatch-worker`
// processes, through the Coordinator library:
//  1. throughput: --closures no-op closures on --workers worker processes
//     (--slots each), all scheduled and then all fetched: closures/s;
//  2. sequential round trips: schedule one no-op, fetch it, repeat: p50, p99.
//     Interleaved with them, the floor that no design can go under: one
//     journal commit of one small record (the dispatcher's Store, same
//     --synchronous, same file system), alone on the machine, back to back
//     and after sleeping 300 us (as the dispatcher's loop has before the
//     round trip's commit).
//  3. what a hop costs here: a loopback round trip to a process that was
//     just active, and to one that slept as long as a commit takes. Every
//     hop of a round trip that waits on an fsync is of the second kind.
// Benchmarks report, never assert.
#include <stdio.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/latency.h"
#include "bench/noop_closures.h"
#include "bench/process_cpu.h"
#include "bench/registry.h"
#include "bench/summary.h"
#include "bench/wakeup_probe.h"
#include "clients/coordinator.h"
#include "common/closure_trace.h"
#include "common/flag_parser.h"
#include "storage/store.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct ClosureFlags {
  uint64_t closures = 100000;
  // Throughput rounds of `closures` each. The first also faults in the
  // dispatcher's heap for that many closures in flight (over a third more
  // dispatcher CPU per closure than later rounds,
  // docs/contributors/benchmarks.md), which a
  // dispatcher in service has long done: it is printed apart, and the figure
  // is the median of the others (three, so that it is one of them).
  uint64_t rounds = 4;
  uint64_t workers = 2;
  // No-op runs inline on the agent loop (no executor thread per slot), so
  // slots cost nothing but let each push carry a batch: with a handful of
  // slots the figure measures the push-report round trip, not the service.
  uint64_t slots = 1024;
  uint64_t sequential = 2000;
  uint64_t warmup = 200;
  std::string synchronous = "full";
  std::string commit_hold_us = "";  // empty: the dispatcher's default
  std::string inline_sync_records = "";  // empty: the dispatcher's default
  // Sequential round trips carry a timestamp trace (ScheduleOptions.trace),
  // printed as a per-stage breakdown.
  bool trace = true;
};

// The stages of the breakdown: from one trace stamp to the next.
struct TraceSpan {
  const char* name;
  ClosureTraceStage from;
  ClosureTraceStage to;
};
constexpr TraceSpan kTraceSpans[] = {
    {"client: Schedule() to loop send", kTraceScheduled, kTraceScheduleSent},
    {"hop: coordinator -> dispatcher", kTraceScheduleSent, kTraceDispatcherReceived},
    {"dispatcher: schedule to push", kTraceDispatcherReceived, kTracePushed},
    {"hop: dispatcher -> worker", kTracePushed, kTraceWorkerReceived},
    {"worker: push to run start", kTraceWorkerReceived, kTraceRunStarted},
    {"worker: run (no-op)", kTraceRunStarted, kTraceRunEnded},
    {"worker: run end to report sent", kTraceRunEnded, kTraceReportSent},
    {"hop: worker -> dispatcher", kTraceReportSent, kTraceReportReceived},
    {"dispatcher: report to commit start", kTraceReportReceived, kTraceCommitStarted},
    {"dispatcher: commit", kTraceCommitStarted, kTraceCommitEnded},
    {"dispatcher: commit end to reply", kTraceCommitEnded, kTraceReplied},
    {"hop: dispatcher -> coordinator", kTraceReplied, kTraceOutcomeReceived},
    {"client: loop to Fetch() return", kTraceOutcomeReceived, kTraceWoken},
};
constexpr size_t kNumSpans = sizeof(kTraceSpans) / sizeof(kTraceSpans[0]);

// Per-span samples of the traced round trips; a trace with a stage missing
// (or out of order) is counted and left out.
struct Breakdown {
  LatencySamples spans[kNumSpans];
  LatencySamples total;
  uint64_t incomplete = 0;

  void Add(std::vector<uint64_t> trace, uint64_t woken_ns) {
    if (trace.size() != kTraceOutcomeReceived + 1) {
      ++incomplete;
      return;
    }
    trace.push_back(woken_ns);
    for (const TraceSpan& span : kTraceSpans) {
      if (trace[span.from] == 0 || trace[span.to] < trace[span.from]) {
        ++incomplete;
        return;
      }
    }
    for (size_t i = 0; i < kNumSpans; ++i)
      spans[i].Add(trace[kTraceSpans[i].to] - trace[kTraceSpans[i].from]);
    total.Add(trace[kTraceWoken] - trace[kTraceScheduled]);
  }
};

void Check(const Status& status, const char* what) {
  if (!status.ok()) throw std::runtime_error(std::string(what) + ": " + status.ToString());
}

// How long the yardsticks' sleepers sleep: about as long as the dispatcher's
// loop sleeps in a sequential round trip before the commit (it waits for the
// worker's report) and the client before the reply. On this VM an fsync
// issued by a thread that just slept costs ~1.4x one issued back to back
// (283-337 against 202-225 us p50 here): the halted vCPU's wake-up is paid
// again when the fsync completes.
constexpr uint64_t kAsleepUs = 300;

// Times `count` commits of one 200-byte record each into `store`, each after
// sleeping `asleep_us` (untimed; 0: back to back).
void TimeCommits(storage::Store& store, uint64_t count, LatencySamples& samples,
                 uint64_t asleep_us = 0) {
  for (uint64_t i = 0; i < count; ++i) {
    if (asleep_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(asleep_us));
    JournalBatch batch;
    batch.AddRecord(std::string(200, static_cast<char>('a' + i % 26)));
    auto begin = Clock::now();
    Check(store.Commit(batch).status(), "journal commit");
    samples.Add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - begin).count());
  }
}

struct SyncCounts {
  double total = -1;  // -1: no /metrics
  double on_loop = -1;
  double seconds = 0;  // their time, from the syncs' histogram
};

// The dispatcher's WAL fsyncs so far, and how many its loop thread ran.
SyncCounts DispatcherSyncs(const testing::DispatcherProcess& dispatcher) {
  SyncCounts counts;
  if (dispatcher.http_url().empty()) return counts;
  const std::string page = testing::HttpGet(dispatcher.http_url(), "/metrics").body;
  counts.total = testing::MetricSample(page, "dispatch_journal_sync_seconds_count");
  counts.on_loop = testing::MetricSample(page, "dispatch_journal_inline_syncs_total");
  counts.seconds = testing::MetricSample(page, "dispatch_journal_sync_seconds_sum");
  return counts;
}

int RunClosuresBench(int argc, char** argv) {
  ClosureFlags flags;
  FlagParser parser("dispatch-bench closures",
                    "No-op closures through the real dispatcher and dispatch-worker processes: "
                    "throughput, then sequential schedule-then-fetch round trips.");
  parser.AddUint("closures", "closures in the throughput phase", &flags.closures, 1, 100000000);
  parser.AddUint("rounds",
                 "throughput rounds of --closures each; the first (cold heap) is printed apart, "
                 "the figure is the median of the others",
                 &flags.rounds, 1, 100);
  parser.AddUint("workers", "dispatch-worker processes", &flags.workers, 1, 64);
  parser.AddUint("slots", "closure slots per worker (--max-closures)", &flags.slots, 1, 1024);
  parser.AddUint("sequential", "round trips in the sequential phase", &flags.sequential, 1,
                 10000000);
  parser.AddUint("warmup", "round trips before measuring", &flags.warmup, 0, 1000000);
  parser.AddString("synchronous", "MODE", "the dispatcher's --synchronous (full or normal)",
                   &flags.synchronous);
  parser.AddString("commit-hold-us", "US",
                   "the dispatcher's --closure-commit-hold-us (empty: its default)",
                   &flags.commit_hold_us);
  parser.AddString("inline-sync-records", "N",
                   "the dispatcher's --inline-sync-records (empty: its default)",
                   &flags.inline_sync_records);
  parser.AddBool("trace", "trace the sequential round trips and print their breakdown",
                 &flags.trace);
  ParseFlagsOrExit(parser, argc, argv);

  testing::DispatcherProcess::Options options;
  options.extra_flags = {"--synchronous=" + flags.synchronous};
  if (!flags.commit_hold_us.empty())
    options.extra_flags.push_back("--closure-commit-hold-us=" + flags.commit_hold_us);
  if (!flags.inline_sync_records.empty())
    options.extra_flags.push_back("--inline-sync-records=" + flags.inline_sync_records);
  testing::DispatcherProcess dispatcher(options);
  std::vector<std::unique_ptr<testing::Subprocess>> workers;
  for (uint64_t i = 0; i < flags.workers; ++i) {
    workers.push_back(StartNoopWorker(dispatcher.address(), flags.slots));
  }
  clients::CoordinatorOptions coordinator_options;
  coordinator_options.dispatcher_address = dispatcher.address();
  auto created = clients::Coordinator::Create(coordinator_options);
  Check(created.status(), "Coordinator::Create");
  std::unique_ptr<clients::Coordinator> coordinator = std::move(created).value();

  // 1. Throughput.
  std::vector<pid_t> pids = {dispatcher.process().pid()};
  for (const auto& worker : workers) pids.push_back(worker->pid());
  CpuMeter cpu(pids);
  // Every round's rate; the figure is made of the rounds after the first
  // (all of them when there is one), and so is the CPU count.
  const uint64_t first_counted = flags.rounds > 1 ? 1 : 0;
  std::vector<double> rates;
  for (uint64_t round = 0; round < flags.rounds; ++round) {
    if (round == first_counted) cpu.Start();
    rates.push_back(NoopClosuresPerSecond(*coordinator, flags.closures));
  }
  cpu.Stop();
  const std::vector<double> counted(rates.begin() + static_cast<long>(first_counted), rates.end());
  const double rate = Median(counted);

  // 2. Sequential round trips, in rounds alternating with the commit floor,
  //    so that both see the same disk (its latency drifts over minutes).
  storage::StoreOptions floor_options;
  floor_options.work_dir = dispatcher.work_dir() + "-commit-floor";
  floor_options.synchronous =
      flags.synchronous == "normal" ? storage::Synchronous::kNormal : storage::Synchronous::kFull;
  auto floor_store = storage::Store::Open(floor_options);
  Check(floor_store.status(), "opening the commit-floor store");
  {
    // Into the steady state the dispatcher's journal is in: a WAL that was
    // checkpointed and restarts from its start, so commits overwrite blocks
    // the file has (cheaper to fsync than appending ones).
    LatencySamples ignored;
    TimeCommits(**floor_store, 3000, ignored);
    auto checkpointer = (*floor_store)->NewCheckpointer();
    Check(checkpointer.status(), "the commit-floor checkpointer");
    auto done = (*checkpointer)->Checkpoint();
    Check(done.status(), "checkpointing the commit-floor store");
    Check((*floor_store)->FinishCheckpoint(*done).status(), "finishing its checkpoint");
  }
  LatencySamples samples;
  LatencySamples floor;
  LatencySamples floor_asleep;
  Breakdown breakdown;
  // Where the dispatcher ran its fsyncs meanwhile (--inline-sync-records):
  // one on the pool costs a round trip two thread hand-offs.
  const SyncCounts syncs_before = DispatcherSyncs(dispatcher);
  clients::ScheduleOptions traced;
  traced.trace = flags.trace;
  samples.Reserve(flags.sequential);
  constexpr uint64_t kRounds = 10;
  for (uint64_t round = 0; round < kRounds; ++round) {
    uint64_t trips = flags.sequential / kRounds + (round < flags.sequential % kRounds ? 1 : 0);
    uint64_t warmup = round == 0 ? flags.warmup : 0;
    for (uint64_t i = 0; i < warmup + trips; ++i) {
      auto begin = Clock::now();
      auto value = coordinator->Schedule("noop", "", traced);
      Check(value.status(), "Schedule");
      Check(value->Fetch().status(), "Fetch");
      const uint64_t woken_ns = TraceNowNanos();
      uint64_t ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - begin).count();
      if (i >= warmup) {
        samples.Add(ns);
        if (flags.trace) breakdown.Add(value->Trace(), woken_ns);
      }
    }
    TimeCommits(**floor_store, std::max<uint64_t>(trips / 4, 25), floor);
    TimeCommits(**floor_store, std::max<uint64_t>(trips / 4, 25), floor_asleep, kAsleepUs);
  }

  const SyncCounts syncs_after = DispatcherSyncs(dispatcher);

  // 3. The price of a wake-up after an fsync-long sleep.
  WakeupProbe probe = ProbeWakeups(500, kAsleepUs);

  printf("\nclosures: %llu no-op closures on %llu workers x %llu slots, --synchronous=%s\n",
         static_cast<unsigned long long>(flags.closures),
         static_cast<unsigned long long>(flags.workers),
         static_cast<unsigned long long>(flags.slots), flags.synchronous.c_str());
  printf("%-36s %12s %12s\n", "figure", "measured", "target");
  printf("%-36s %12.0f %12s\n", "throughput (closures/s)", rate, ">= 50000");
  if (flags.rounds > 1) {
    printf("%-36s %12.0f %12s\n", "throughput, first round (cold heap)", rates[0], "");
    printf("%-36s", "  each later round");
    for (double r : counted) printf(" %.0f", r);
    printf("\n");
  }
  const double per_closure = 1000.0 * static_cast<double>(flags.closures * counted.size());
  printf("%-36s %12.2f %12s\n", "dispatcher CPU per closure (us)",
         cpu.nanos()[0] / per_closure, "");
  printf("%-36s %12.2f %12s\n", "workers' CPU per closure (us)",
         cpu.total_nanos(1, workers.size()) / per_closure, "");
  printf("%-36s %12.2f %12s\n", "coordinator CPU per closure (us)",
         cpu.self_nanos() / per_closure, "");
  printf("%-36s %12.1f %12s\n", "sequential round trip p50 (us)", samples.PercentileMicros(50),
         "< 500");
  printf("%-36s %12.1f %12s\n", "sequential round trip p99 (us)", samples.PercentileMicros(99), "");
  printf("%-36s %12.1f %12s\n", "floor: one journal commit p50 (us)", floor.PercentileMicros(50), "");
  printf("%-36s %12.1f %12s\n", "  the same after 300 us asleep (us)",
         floor_asleep.PercentileMicros(50), "");
  printf("%-36s %12.1f %12s\n", "round trip p50 minus the floor (us)",
         samples.PercentileMicros(50) - floor.PercentileMicros(50), "");
  if (syncs_before.total >= 0 && syncs_after.total >= 0) {
    printf("%-36s %12.0f %12s\n", "  dispatcher fsyncs meanwhile",
           syncs_after.total - syncs_before.total, "");
    printf("%-36s %12.0f %12s\n", "  of which on its loop thread",
           syncs_after.on_loop - syncs_before.on_loop, "");
    const double count = std::max(1.0, syncs_after.total - syncs_before.total);
    printf("%-36s %12.1f %12s\n", "  their mean (us)",
           (syncs_after.seconds - syncs_before.seconds) * 1e6 / count, "");
  }
  printf("%-36s %12.1f %12s\n", "hop to a busy process p50 (us)", probe.awake_p50_us, "");
  printf("%-36s %12.1f %12s\n", "hop to one idle 300 us p50 (us)", probe.asleep_p50_us, "");
  {
    // Issue 19's targets, judged against this run's own floor.
    const std::string mode = " (--synchronous=" + flags.synchronous + ")";
    Figure round_trip;
    round_trip.figure = "closures sequential round trip p50 (us)" + mode;
    round_trip.value = samples.PercentileMicros(50);
    // The round trip's commit is issued by a loop that slept waiting for the
    // report: its floor is a commit after sleeping, like its hops'.
    round_trip.floor = floor_asleep.PercentileMicros(50) + 4 * probe.asleep_p50_us + 40;
    round_trip.target = 1.0;
    round_trip.target_on_ratio = true;
    round_trip.target_text = "<= commit after sleep + 4 idle hops + 40 us";
    ReportFigure(round_trip);
    Figure throughput;
    throughput.figure = "closures/s, " + std::to_string(flags.workers) + " workers" + mode;
    throughput.value = rate;
    throughput.target = 250000;
    throughput.at_least = true;
    throughput.target_text = ">= 250k";
    ReportFigure(throughput);
  }
  if (flags.trace && breakdown.total.count() > 0) {
    printf("\nsequential round trip, per stage (%zu traced, %llu incomplete):\n",
           breakdown.total.count(), static_cast<unsigned long long>(breakdown.incomplete));
    printf("%-36s %10s %10s\n", "stage", "p50 (us)", "p90 (us)");
    double sum = 0;
    for (size_t i = 0; i < kNumSpans; ++i) {
      const double p50 = breakdown.spans[i].PercentileMicros(50);
      sum += p50;
      printf("%-36s %10.1f %10.1f\n", kTraceSpans[i].name, p50,
             breakdown.spans[i].PercentileMicros(90));
    }
    printf("%-36s %10.1f\n", "sum of the stages' p50", sum);
    printf("%-36s %10.1f %10.1f\n", "traced round trip", breakdown.total.PercentileMicros(50),
           breakdown.total.PercentileMicros(90));
  }
  return 0;
}

DISPATCH_BENCH("closures", "closure throughput and sequential round trips (FULL)",
               RunClosuresBench);

}  // namespace
}  // namespace dispatch::bench
