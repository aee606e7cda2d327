// BackgroundSnapshot: writes a snapshot file without holding the loop, as
// Redis's BGSAVE does. The state is pure and owned by the loop thread, so a
// fork() at a commit boundary hands a child a consistent copy-on-write image
// of it; the child encodes that image (state::EncodeSnapshot), writes it with
// storage::WriteSnapshotFile and reports on a pipe, then _exit()s. It touches
// no SQLite, libuv, KJ event loop, lock or logger of the parent. The parent
// learns of the end on the loop (the pipe, watched by libuv, then
// waitpid(WNOHANG)) and records the file (DurableState does, in the Store).
// At most one child at a time. REQUIRES: loop thread for every method.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "state/dispatcher_state.h"
#include "storage/snapshot_file.h"

namespace dispatch::reactor {

struct SnapshotOutcome {
  // Ok: `info` names a complete, durable file in the work dir. Otherwise why
  // the child failed (its own error, or how it died).
  Status status;
  storage::SnapshotFileInfo info;
  uint64_t fork_micros = 0;    // the fork() call itself, on the loop thread
  uint64_t child_micros = 0;   // encoding and writing in the child
  uint64_t total_micros = 0;   // from the fork until the parent reaped the child
  uint64_t started_ns = 0;     // uv_hrtime() before the fork
};

// Test hooks: make the child stop at a chosen point of the protocol.
enum class SnapshotChildFault {
  kNone,
  kExitBeforeWriting,  // dies after the fork, writes nothing
  kCrashAfterWriting,  // the file is complete and renamed, then SIGKILL before reporting
};

class BackgroundSnapshot {
 public:
  using DoneFn = std::function<void(SnapshotOutcome)>;

  // `max_bytes`: an encoded state over it is refused by the child.
  BackgroundSnapshot(uv_loop_t* loop, std::string work_dir, uint64_t max_bytes);
  // Kills and reaps a child still running (its temp file is removed at the
  // next start-up); `done` is not called.
  ~BackgroundSnapshot();
  BackgroundSnapshot(const BackgroundSnapshot&) = delete;
  BackgroundSnapshot& operator=(const BackgroundSnapshot&) = delete;

  // Forks a child that writes `state` as the snapshot after record `seq`.
  // `done` runs once, on the loop thread, when the child is reaped.
  // FailedPrecondition if one is in flight; Unavailable if fork() or pipe()
  // failed (nothing started, `done` not called).
  Status Start(const state::DispatcherState& state, uint64_t seq, DoneFn done);
  bool in_flight() const { return pid_ > 0; }
  uint64_t in_flight_seq() const { return seq_; }

  // Kills the child in flight (SIGKILL), reaps it and removes its temp file;
  // `done` is not called. No-op when nothing is in flight.
  void Abort();

  void set_fault_for_testing(SnapshotChildFault fault) { fault_ = fault; }

 private:
  [[noreturn]] void RunChild(const state::DispatcherState& state, uint64_t seq, int report_fd);
  static void OnReadable(uv_poll_t* handle, int status, int events);
  void ReadReport();
  void TryReap();
  void Finish(Status status);
  void StopWatching();

  uv_loop_t* const loop_;
  const std::string work_dir_;
  const uint64_t max_bytes_;
  SnapshotChildFault fault_ = SnapshotChildFault::kNone;

  pid_t pid_ = 0;
  uint64_t seq_ = 0;
  int report_fd_ = -1;
  uv_poll_t* poll_ = nullptr;
  uv_timer_t* reap_timer_ = nullptr;
  std::string report_;  // what the child wrote so far
  bool report_closed_ = false;
  SnapshotOutcome outcome_;
  DoneFn done_;
};

}  // namespace dispatch::reactor
