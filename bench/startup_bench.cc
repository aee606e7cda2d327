// `dispatch-bench startup`: how long a dispatcher takes to come back. Journals
// N real Updates (the random valid mix of tests/state's UpdateGenerator) through
// DurableState, then times DurableState::Recover — open, load the snapshot,
// decode and Apply every journal record after it — without a snapshot (full
// replay) and with one (snapshot + a short tail). Reports; asserts nothing.
#include <stdio.h>

#include <chrono>
#include <filesystem>
#include <random>

#include "bench/registry.h"
#include "common/flag_parser.h"
#include "reactor/durable_state.h"
#include "reactor/uvkj/uv_handle.h"
#include "storage/store.h"
#include "tests/state/update_generator.h"
#include "tests/support/temp_dir.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct StartupFlags {
  uint64_t updates = 1000000;
  uint64_t tail = 10000;  // updates journaled after the snapshot
  uint64_t pass = 256;    // updates per group commit while journaling
  uint64_t seed = 1;
  uint64_t runs = 3;
};

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::unique_ptr<storage::Store> OpenStore(const std::string& dir) {
  storage::StoreOptions options;
  options.work_dir = dir;
  options.synchronous = storage::Synchronous::kNormal;  // journaling speed is not measured here
  auto store = storage::Store::Open(options);
  if (!store.ok()) {
    fprintf(stderr, "dispatch-bench startup: %s\n", store.status().ToString().c_str());
    exit(1);
  }
  return std::move(store.value());
}

void Journal(uv_loop_t* loop, const std::string& dir, state::testing::UpdateGenerator& generator,
             uint64_t count, uint64_t pass) {
  auto store = OpenStore(dir);
  auto durable = reactor::DurableState::Recover(loop, *store, {.snapshot_every = 0});
  if (!durable.ok()) exit(1);
  for (uint64_t i = 1; i <= count; ++i) {
    auto update = generator.Next((*durable)->state());
    if (!(*durable)->pipeline().Submit(update.reader()).ok()) {
      fprintf(stderr, "dispatch-bench startup: generated update %llu was rejected\n",
              static_cast<unsigned long long>(i));
      exit(1);
    }
    if (i % pass == 0) (*durable)->CommitNow();
  }
  (*durable)->CommitNow();
}

// Median seconds of `runs` recoveries of `dir`, and what was recovered.
double TimeRecovery(uv_loop_t* loop, const std::string& dir, uint64_t runs, uint64_t* replayed,
                    uint64_t* applied) {
  std::vector<double> seconds;
  for (uint64_t r = 0; r < runs; ++r) {
    auto start = Clock::now();
    auto store = OpenStore(dir);
    auto durable = reactor::DurableState::Recover(loop, *store, {});
    seconds.push_back(SecondsSince(start));
    if (!durable.ok()) {
      fprintf(stderr, "dispatch-bench startup: %s\n", durable.status().ToString().c_str());
      exit(1);
    }
    *replayed = (*durable)->recovery().replayed;
    *applied = (*durable)->state().NumApplied();
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

int RunStartupBench(int argc, char** argv) {
  StartupFlags flags;
  FlagParser parser("dispatch-bench startup",
                    "Start-up (recovery) time after N journaled Updates, with and without a snapshot.");
  parser.AddUint("updates", "Updates journaled before the restart", &flags.updates, 1, 100000000);
  parser.AddUint("tail", "Updates journaled after the snapshot", &flags.tail, 0, 100000000);
  parser.AddUint("pass", "Updates per group commit while journaling", &flags.pass, 1, 1000000);
  parser.AddUint("seed", "seed of the update mix", &flags.seed);
  parser.AddUint("runs", "recoveries timed per case (median printed)", &flags.runs, 1, 100);
  ParseFlagsOrExit(parser, argc, argv);

  uvkj::UvLoop loop;
  testing::TempDir dir;
  state::testing::UpdateGenerator generator(flags.seed);

  auto start = Clock::now();
  Journal(loop.get(), dir.path(), generator, flags.updates, flags.pass);
  double journal_s = SecondsSince(start);
  auto db_bytes = std::filesystem::file_size(dir.path() + "/dispatch.db");

  uint64_t replayed = 0, applied = 0;
  double full_s = TimeRecovery(loop.get(), dir.path(), flags.runs, &replayed, &applied);
  printf("\nstartup: %llu updates journaled in %.1f s (database %.1f MB)\n",
         static_cast<unsigned long long>(flags.updates), journal_s, db_bytes / 1e6);
  printf("%-34s %10s %12s %12s\n", "case", "seconds", "replayed", "applied");
  printf("%-34s %10.3f %12llu %12llu\n", "no snapshot (full replay)", full_s,
         static_cast<unsigned long long>(replayed), static_cast<unsigned long long>(applied));

  // Snapshot the state after all N, then journal a tail on top of it.
  {
    auto store = OpenStore(dir.path());
    auto durable = reactor::DurableState::Recover(loop.get(), *store, {});
    if (!durable.ok() || !(*durable)->compaction().Snapshot().ok()) exit(1);
  }
  uint64_t snapshot_bytes = 0;
  {
    auto store = OpenStore(dir.path());
    auto snap = store->LoadLatestSnapshot();
    if (snap.ok() && snap->has_value()) snapshot_bytes = (*snap)->bytes.size();
  }
  if (flags.tail > 0) Journal(loop.get(), dir.path(), generator, flags.tail, flags.pass);
  double snap_s = TimeRecovery(loop.get(), dir.path(), flags.runs, &replayed, &applied);
  std::string label = "snapshot (" + std::to_string(snapshot_bytes / 1024) + " KiB) + " +
                      std::to_string(flags.tail) + " tail";
  printf("%-34s %10.3f %12llu %12llu\n", label.c_str(), snap_s, static_cast<unsigned long long>(replayed),
         static_cast<unsigned long long>(applied));
  printf("replay rate without snapshot: %.0f updates/s\n", flags.updates / full_s);
  printf("target: start-up with a snapshot under 1 s: %s\n", snap_s < 1.0 ? "met" : "NOT met");
  if (loop.Close() != 0) fprintf(stderr, "warning: loop closed with handles open\n");
  return 0;
}

DISPATCH_BENCH("startup", "recovery time after N real Updates, with and without a snapshot",
               RunStartupBench);

}  // namespace
}  // namespace dispatch::bench
