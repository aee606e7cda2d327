// The phases of `dispatch-bench snapshot` (bench/snapshot_bench.cc): one run
// of a dispatcher on the built work dir with a writer (so snapshots come due)
// and a 1 kHz pinger at it. The dispatcher runs either on a thread of the
// bench process, where its counters can be read directly, or as the real
// `dispatcher` binary, a process of its own as operators run it: then the
// bench's own threads (the writer, the pinger) share no allocator, address
// space or scheduler group with it, and its figures come from its /metrics,
// /proc and its log.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/kernel_thread_probe.h"
#include "bench/ping_probe.h"
#include "reactor/snapshot_replica.h"

namespace dispatch::bench {

struct SnapshotFlags {
  uint64_t entities = 1000000;
  uint64_t seconds = 15;  // per phase
  uint64_t hz = 1000;
  uint64_t writes_per_s = 1000;
  uint64_t snapshot_every = 1000;
  std::string phases = "floor,background,inline";
  std::string work_dir;  // empty: a temp dir
  bool synchronous_full = true;
  uint64_t checkpoint_wal_frames = 0;  // 0: the store's default (thread mode only)
  std::string dispatcher = "process";  // "process" or "thread"
  std::string dispatcher_flags;        // process mode: more flags, space-separated
};

struct PhaseResult {
  std::vector<PingSample> pings;
  // Runs of the machine's kdamond kernel threads of 1 ms or more while the
  // pings ran (bench/kernel_thread_probe.h); `kdamond_found`: there is one.
  std::vector<KernelThreadRun> kdamond_runs;
  bool kdamond_found = false;
  // In process mode only the fields the log line of a recorded snapshot
  // gives (status, size, catch-up, write and total times, start), and a
  // failed one as a non-ok status.
  std::vector<reactor::SnapshotOutcome> snapshots;
  uint64_t writes = 0;
  uint64_t commits = 0, commits_over_5ms = 0, commits_over_25ms = 0;
  // The loop's own busy passes (reactor/loop_pass_meter.h): whether the
  // dispatcher held a reply, apart from the pinger's own scheduling.
  uint64_t passes = 0, passes_over_5ms = 0, passes_over_10ms = 0, longest_pass_us = 0;
  // WAL restarts by the checkpointer's write and by a commit on the loop
  // (whose header fsync holds the loop); the loop thread's involuntary
  // context switches: the scheduler, not the dispatcher, held it then.
  uint64_t wal_restarts_pool = 0, wal_restarts_loop = 0;
  long loop_preemptions = 0;
  double startup_s = 0;
  long max_rss_kb = 0;      // of the process the dispatcher ran in
};

// Runs the writer and the pinger at `address` ("HOST:PORT") for
// flags.seconds; fills result.pings, result.writes and the kdamond runs.
void DriveLoad(const std::string& address, const SnapshotFlags& flags, PhaseResult& result);

// The phase with the real dispatcher binary on `dir`. Throws
// std::runtime_error if it does not start.
PhaseResult RunPhaseInProcess(const std::string& dir, const SnapshotFlags& flags,
                              uint64_t snapshot_every, bool background);

}  // namespace dispatch::bench
