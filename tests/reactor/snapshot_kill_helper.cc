// snapshot_kill_helper: the process the kill -9 snapshot test kills. It
// recovers a DurableState from <dir>, then journals generated updates in
// passes forever with background snapshots every <every> records, and
// reports each event on stdout with write(2) the moment it happens:
//   "C <last_seq> <digest>"  a pass committed; the state's digest after it
//   "F <seq>"                a snapshot task started for record <seq>
//   "S <seq>"                the snapshot at <seq> was recorded
//   "X <message>"            a snapshot attempt failed
//   "K" / "k"                a checkpoint started on the thread pool / came back
//   "D <last_seq> <digest>"  (with <shutdown_after>) the shutdown snapshot starts
//   "d"                      the shutdown snapshot is written; the process exits
// usage: snapshot_kill_helper <dir> <seed> <every> [<shutdown_after>]
// With <shutdown_after> > 0 it shuts down as the dispatcher does after that
// many passes: commits what is pending, then writes a snapshot on this thread.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "reactor/durable_state.h"
#include "reactor/uvkj/uv_handle.h"
#include "storage/store.h"
#include "tests/state/update_generator.h"
#include "tests/support/child_report.h"

namespace {

using namespace dispatch;

using dispatch::testing::Die;
using dispatch::testing::Report;

int Run(const std::string& dir, uint64_t seed, uint64_t every, uint64_t shutdown_after) {
  uvkj::UvLoop loop;
  storage::StoreOptions store_options;
  store_options.work_dir = dir;
  store_options.synchronous = storage::Synchronous::kNormal;  // a kill -9 loses nothing either way
  store_options.truncate_records_per_commit = 64;  // so kills land mid-truncation too
  store_options.checkpoint_wal_frames = 64;         // ... and mid-checkpoint
  auto store = storage::Store::Open(store_options);
  if (!store.ok()) Die(store.status());
  reactor::DurableStateOptions options;
  options.snapshot_every = every;
  options.snapshot_retry_ms = 0;
  options.snapshot_observer = [](const reactor::SnapshotOutcome& outcome) {
    if (outcome.status.ok()) {
      Report("S " + std::to_string(outcome.info.seq));
    } else {
      Report("X " + outcome.status.ToString());
    }
  };
  auto durable = reactor::DurableState::Recover(loop.get(), **store, options);
  if (!durable.ok()) Die(durable.status());
  reactor::DurableState& state = **durable;
  state::testing::UpdateGenerator generator(seed);
  std::mt19937_64 rng(seed);
  for (uint64_t pass = 1;; ++pass) {
    if (shutdown_after != 0 && pass > shutdown_after) {
      state.CommitNow();
      if (state.pipeline().failed()) Die(InternalError("the commit failed"));
      Report("D " + std::to_string((*store)->last_seq()) + " " + std::to_string(state.state().Digest()));
      Status snapshot = state.compaction().Snapshot();
      if (!snapshot.ok()) Die(snapshot);
      Report("d");
      return 0;
    }
    const int count = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < count; ++i) {
      auto update = generator.Next(state.state());
      Status status = state.pipeline().Submit(update.reader());
      if (!status.ok()) Die(status);
    }
    const bool was_in_flight = state.compaction().snapshot_in_flight();
    const bool was_checkpointing = state.compaction().checkpoint_in_flight();
    // Now, not CommitPass: "C" reports the state as committed, and
    // CommitPass may wait for a checkpoint to come back (commits_held()).
    state.CommitNow();
    if (state.pipeline().failed()) Die(InternalError("the commit failed"));
    Report("C " + std::to_string((*store)->last_seq()) + " " +
           std::to_string(state.state().Digest()));
    if (!was_in_flight && state.compaction().snapshot_in_flight()) {
      Report("F " + std::to_string((*store)->last_seq()));
    }
    if (!was_checkpointing && state.compaction().checkpoint_in_flight()) Report("K");
    const bool checkpointing = state.compaction().checkpoint_in_flight();
    uv_run(loop.get(), UV_RUN_NOWAIT);
    if (checkpointing && !state.compaction().checkpoint_in_flight()) Report("k");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: snapshot_kill_helper <dir> <seed> <every> [<shutdown_after>]\n");
    return 2;
  }
  return Run(argv[1], std::strtoull(argv[2], nullptr, 10), std::strtoull(argv[3], nullptr, 10),
             argc == 5 ? std::strtoull(argv[4], nullptr, 10) : 0);
}
