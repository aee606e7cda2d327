// ClosureDispatcher: the loop-thread half of closure coordination. It hands
// queued closures to live workers with free slots (one batch Update and one
// runClosures push per worker per loop pass), turns worker reports into
// finished / failed / put-back closures, retries closures whose worker failed
// (at-least-once, at most max_closure_attempts runs), makes a failure the
// coordinator's first error and cancels its queued closures, and wakes the
// coordinator sessions and schedules waiting on those changes. It holds no
// state of record: every change is an Update through DurableState.
// Ownership: refcounted. DataService holds it, and so does every
// CoordinatorSession and Room it hands out, so no pointer between them can
// dangle whichever goes first (capnp may keep a session alive after its
// connection, until its calls end). DataService closes it before the parts
// it borrows (DurableState, WorkerRegistry) go: Close() cancels all work
// outstanding (its own tasks in a kj::TaskSet; the sessions' waiting calls
// through a kj::Canceler) and stops its timers. After that, sessions see
// closed() and fail their calls; leaving sessions and returned rooms still
// reach it, and touch nothing borrowed.
// REQUIRES: loop thread only.
#pragma once

#include <capnp/list.h>
#include <kj/async.h>
#include <uv.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "reactor/closure_options.h"
#include "reactor/durable_state.h"
#include "reactor/uvkj/repeating_timer.h"
#include "reactor/worker_registry.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::reactor {

class CoordinatorSession;

struct ClosureCounters {
  uint64_t scheduled = 0;
  uint64_t results_accepted = 0;
  uint64_t reports_ignored = 0;
  uint64_t put_back = 0;
  uint64_t transient_retries = 0;
  uint64_t attempts_exhausted = 0;
  uint64_t released = 0;
  uint64_t pushes_failed = 0;
  uint64_t schedule_waits = 0;
  uint64_t results_over_limit = 0;  // results refused as over max_result_bytes
};

class ClosureDispatcher final : public kj::Refcounted {
 public:
  // Allocate with kj::refcounted (sessions and rooms take references).
  ClosureDispatcher(uv_loop_t* loop, DurableState& durable, WorkerRegistry& workers,
                    ClosureOptions options);
  ~ClosureDispatcher() noexcept(false);
  ClosureDispatcher(const ClosureDispatcher&) = delete;
  ClosureDispatcher& operator=(const ClosureDispatcher&) = delete;

  // Ends the service (see the top of this file). Idempotent.
  void Close();
  bool closed() const { return closed_; }
  // Wraps a promise a session returns whose continuation uses the
  // dispatcher (a wait for room, results or a join): Close() cancels it.
  template <typename T>
  kj::Promise<T> CancelOnClose(kj::Promise<T> promise) {
    return session_calls_.wrap(kj::mv(promise));
  }

  // After recovery: closures that were running before the restart go back to
  // the queue (their workers dropped the reports when the link broke).
  Status Start();

  const ClosureOptions& options() const { return options_; }
  const state::DispatcherState& state() const { return durable_.state(); }
  DurableState& durable() { return durable_; }
  const ClosureCounters& counters() const { return counters_; }
  void CountIgnored(uint64_t n) { counters_.reports_ignored += n; }

  // ---- Workers ------------------------------------------------------------
  // A heartbeat of `worker` announcing `slots` closure slots. `attached`: the
  // first heartbeat on this link (starts the staggered-start clock).
  void OnWorkerHeartbeat(const state::Worker& worker, uint32_t slots, bool attached);
  // The worker is being removed: each of its closures is put back, or failed
  // when it has had max_closure_attempts runs. Journaled before RemoveWorker.
  Status OnWorkerLost(uint64_t worker_id, const std::string& reason);
  // A worker's reports; returns how many were ignored (not running there as
  // that attempt, or repeated).
  Result<uint32_t> Report(uint64_t worker_id, capnp::List<rpc::ClosureReport>::Reader reports);

  // ---- Coordinators -------------------------------------------------------
  // Room for `n` closures in the queue, reserved while this lives (so that
  // schedules admitted in one pass do not all overshoot the bound).
  class Room {
   public:
    Room(kj::Own<ClosureDispatcher> owner, uint64_t n) : owner_(kj::mv(owner)), n_(n) {}
    ~Room();
    Room(const Room&) = delete;
    Room& operator=(const Room&) = delete;

   private:
    kj::Own<ClosureDispatcher> owner_;
    const uint64_t n_;
  };
  // Resolves once `n` more closures fit in the queue (FIFO among waiters).
  kj::Promise<kj::Own<Room>> WaitForRoom(uint64_t n);
  // Queues the closures of `specs` for `coordinator_id`; fills the id of each
  // (an earlier closure's id when its request id was used before).
  Status Schedule(uint64_t coordinator_id, capnp::List<rpc::ClosureSpec>::Reader specs,
                  std::vector<uint64_t>& ids);
  // Forgets finished, failed or cancelled closures of the coordinator. The
  // release is journaled with the next update that commits anyway (or within
  // kReleaseDelayMs): a release acknowledges nothing, and one lost in a crash
  // only means the outcome is reported again to the coordinator, which has it.
  Status Release(uint64_t coordinator_id, capnp::List<uint64_t>::Reader closure_ids);
  // Journals the pending releases (also run at shutdown).
  void FlushReleases();
  // Released by the coordinator, not journaled yet: treated as gone.
  bool ReleasePending(uint64_t closure_id) const { return pending_releases_.contains(closure_id); }
  // Journals a per-worker resource and sends it to every worker with closure
  // slots once committed. A nonzero `request_id` already used by this
  // coordinator returns the resource it made (InvalidArgument if that one
  // has another function or args).
  Result<uint64_t> CreateResource(uint64_t coordinator_id, std::string_view function,
                                  std::string_view args, uint64_t request_id);
  // Raises the pending first error once: fills `error` and clears it.
  Status TakeFirstError(uint64_t coordinator_id, rpc::ClosureError::Builder error);

  void AddSession(CoordinatorSession* session);
  void RemoveSession(CoordinatorSession* session);

 private:
  struct WorkerSlots {
    std::string address;
    uint32_t slots = 0;
    uint64_t eligible_at_ms = 0;  // staggered start
    bool paused = false;          // reported itself unavailable; until its next heartbeat
    std::set<uint64_t> resources_sent;  // per-worker resources pushed on this connection
  };
  struct RoomWaiter {
    uint64_t n = 0;
    kj::Own<kj::PromiseFulfiller<kj::Own<Room>>> fulfiller;
  };
  class ErrorHandler final : public kj::TaskSet::ErrorHandler {
   public:
    void taskFailed(kj::Exception&& exception) override;
  };

  // The journal's per-record limit: closure batches are cut to fit it.
  size_t MaxRecordBytes() const { return durable_.max_record_bytes(); }
  // Runs AssignQueued once, later in this loop pass.
  void Kick();
  // Adds to tasks_. REQUIRES: not closed.
  void AddTask(kj::Promise<void> task);
  void AssignQueued();
  kj::Promise<void> Push(uint64_t worker_id, std::vector<uint64_t> closure_ids);
  // The push of these closures to the worker failed: those still running
  // there as the same attempt go back to the queue.
  // Pushes the committed per-worker resources this worker's connection has
  // not had yet (no closures), so that it builds them at once.
  void SendResources(uint64_t worker_id);
  void PushFailed(uint64_t worker_id, const std::vector<std::pair<uint64_t, uint32_t>>& refs);
  // Puts the closure back, or fails it when its runs (or transient failures)
  // are used up.
  Status Retry(const state::Closure& closure, bool transient, const std::string& why);
  // Fails the closure, then cancels the coordinator's queued closures.
  Status Fail(uint64_t closure_id, uint64_t worker_id, uint32_t attempt, const std::string& error,
              bool user_error);
  Status CancelQueued(uint64_t coordinator_id);
  void NotifyDone(uint64_t coordinator_id, uint64_t closure_id);
  void NotifyError(uint64_t coordinator_id);
  void WakeRoomWaiters();
  kj::Own<Room> Reserve(uint64_t n);
  void ReleaseRoom(uint64_t n);
  uint64_t QueuedOrReserved() const;

  uv_loop_t* const loop_;
  DurableState& durable_;
  WorkerRegistry& workers_;
  const ClosureOptions options_;
  std::map<uint64_t, WorkerSlots> slots_;  // by worker id
  uint64_t workers_attached_ = 0;          // for the staggered start
  uint64_t next_worker_turn_ = 0;          // round robin start among workers
  bool kick_pending_ = false;
  static constexpr uint64_t kReleaseDelayMs = 10;
  // Most closure bytes (function, args) in one runClosures push; a worker
  // with many slots gets several pushes rather than one past its limit.
  static constexpr size_t kMaxPushBytes = 16u << 20;
  static constexpr size_t kMaxPendingReleases = 4096;
  // Items per `finished` record (about 40 bytes each: a record stays small
  // however long the worker's report list is).
  static constexpr size_t kMaxFinishedPerRecord = 8192;
  bool closed_ = false;
  std::set<uint64_t> pending_releases_;
  std::unique_ptr<uvkj::UvRepeatingTimer> release_timer_;
  // Closures pushed under the current commit hold whose reports are awaited.
  std::set<uint64_t> awaiting_reports_;
  uint64_t reserved_ = 0;                  // room admitted to waiting schedules
  std::deque<RoomWaiter> room_waiters_;
  std::multimap<uint64_t, CoordinatorSession*> sessions_;  // by coordinator id
  ClosureCounters counters_;
  std::unique_ptr<uvkj::UvRepeatingTimer> stagger_timer_;
  ErrorHandler error_handler_;
  // Pushes, barriers and kicks in flight; dropped by Close() (pushes hold
  // worker capabilities, which must go before the connections do).
  kj::Own<kj::TaskSet> tasks_;
  // The sessions' calls waiting on us (CancelOnClose).
  kj::Canceler session_calls_;
};

}  // namespace dispatch::reactor
