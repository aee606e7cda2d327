// SnapshotReplica: writes snapshot files without holding the loop. It keeps a
// second DispatcherState, the replica, that only a thread-pool task touches
// while one runs (uv_queue_work hands it over and back: no lock). A task
// brings the replica to record `seq` by applying the journal records after
// its position, read back through its own storage::JournalReader (Apply is
// deterministic: replaying the journal reproduces the state exactly), checks
// it against the live state's update count, encodes it and writes the file;
// the loop then records the file in the Store. The replica starts from the
// recorded snapshot file (or the empty state), and starts over from it after
// anything that casts doubt on it. At most one task at a time.
// Why not fork(): on the VM this was measured on, every write fault after a
// fork costs 30-90 us, and the loop stalled 150-620 ms after each fork of a
// 150 MB process even when the child exited at once (see docs/operators/durability.md).
// REQUIRES: loop thread for every method.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "reactor/uvkj/pool_work.h"
#include "state/codec.h"
#include "state/dispatcher_state.h"
#include "storage/journal_reader.h"
#include "storage/snapshot_file.h"
#include "storage/store.h"

namespace dispatch::reactor {

struct SnapshotOutcome {
  // Ok: `info` names a complete, durable file in the work dir. Otherwise why
  // the attempt failed; nothing was recorded.
  Status status;
  storage::SnapshotFileInfo info;
  uint64_t records_applied = 0;  // journal records the replica applied to catch up
  uint64_t catch_up_micros = 0;  // reading the seed file and applying records
  uint64_t write_micros = 0;     // encoding and writing the file
  uint64_t total_micros = 0;     // from Start until the loop had the result
  uint64_t started_ns = 0;       // uv_hrtime() at Start
};

// Test hooks: make a task fail at a chosen point of the protocol.
enum class SnapshotFault {
  kNone,
  kFailBeforeWriting,  // after catching up, before the file is written
  kFailAfterWriting,   // the file is complete and renamed, then the task fails
};

class SnapshotReplica {
 public:
  using DoneFn = std::function<void(SnapshotOutcome)>;

  // `store` must outlive this object (its work dir and latest snapshot seed
  // the replica).
  static Result<std::unique_ptr<SnapshotReplica>> Create(uv_loop_t* loop, storage::Store& store);
  // Gives a task in flight up without waiting for it (uvkj::PoolWork): it
  // stops at its next check and is freed when libuv hands it back, calling
  // nobody. The task owns all it touches (its journal reader, encoder and
  // replica), so it never needs this object or the Store. A file it was
  // writing is nobody's, as after a crash: the next start-up removes it.
  // Joins the priming thread (it borrows this object).
  ~SnapshotReplica();
  SnapshotReplica(const SnapshotReplica&) = delete;
  SnapshotReplica& operator=(const SnapshotReplica&) = delete;

  // Start-up: builds the replica on a thread of its own from `snapshot` (the
  // bytes start-up loaded, shared read-only; null: the empty state) and the
  // journal records snapshot_seq+1 .. through_seq, while the loop thread
  // recovers the live state from the same inputs. FinishPriming joins it (no
  // lock needed), so the replica's big allocations happen before the
  // dispatcher serves, not in the middle of its first snapshot. A priming
  // that fails only means the first task starts over from the file.
  void StartPriming(std::shared_ptr<const std::string> snapshot, uint64_t snapshot_seq,
                    uint64_t through_seq);
  // `num_applied`: the recovered live state's NumApplied(), which the
  // replica must match. Returns why the replica was not kept, if it was not.
  Status FinishPriming(uint64_t num_applied);

  // Starts a task that brings the replica to record `seq` and writes it as
  // the snapshot after `seq`. `num_applied` is the live state's NumApplied()
  // after `seq` (the replica must agree). `done` runs once, on the loop
  // thread. FailedPrecondition if a task is in flight.
  Status Start(uint64_t seq, uint64_t num_applied, DoneFn done);
  bool in_flight() const { return task_.in_flight(); }
  // Asks a task in flight to stop at its next check; its `done` still runs
  // (with an Unavailable status).
  void Cancel();
  // The live state was replaced (ResetKeepingIds): the next task starts over
  // from the recorded snapshot.
  void Invalidate();

  void set_fault_for_testing(SnapshotFault fault) { fault_ = fault; }

 private:
  struct Task;
  SnapshotReplica(uv_loop_t* loop, storage::Store& store,
                  std::unique_ptr<storage::JournalReader> reader);
  void Finish(std::unique_ptr<Task> task);  // back on the loop thread

  uv_loop_t* const loop_;
  storage::Store& store_;
  // Owned here while idle; handed to the task while one runs.
  std::unique_ptr<storage::JournalReader> reader_;
  std::unique_ptr<state::DispatcherState> replica_;  // null: start over from the seed
  // Travels with the task like the replica: its memory is reused by every
  // background snapshot.
  std::unique_ptr<state::SnapshotEncoder> encoder_ = std::make_unique<state::SnapshotEncoder>();
  uint64_t replica_seq_ = 0;  // the record the replica stands after
  bool invalidated_in_flight_ = false;
  SnapshotFault fault_ = SnapshotFault::kNone;
  // The priming thread writes only these, read after join().
  std::thread priming_;
  std::unique_ptr<state::DispatcherState> primed_;
  uint64_t primed_seq_ = 0;
  Status priming_status_;
  // The task in flight, if any.
  uvkj::PoolWork<Task> task_;
};

}  // namespace dispatch::reactor
