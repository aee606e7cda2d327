// ClosureDispatcher: the loop-thread half of closure coordination. The
// decisions are the pure planner's (state/closure_planner.h: which closure to
// which worker slot, retry or fail, cancel on a first error, staggered start)
// and the request checks state/closure_requests.h's; this class carries their
// Updates out through DurableState (Carry) and does what needs the loop: it
// keeps what workers' heartbeats say (slots, functions: soft state, the
// planner's LiveWorker), runs the assignment pass once per loop pass (one
// runClosures push per worker), holds the commit for the reports of closures
// pushed before it, pushes per-worker resources, defers releases, parks
// schedules waiting for queue room, keeps one timer at the earliest closure
// deadline and tells workers of the closures cancelled or timed out while they
// ran them (closure_endings.cc; the decisions are state/closure_endings.h's),
// and wakes the coordinator sessions that the Updates it carried concern. It
// holds no state of record.
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

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "reactor/buffer_cache.h"
#include "reactor/closure_options.h"
#include "reactor/closure_traces.h"
#include "reactor/durable_state.h"
#include "reactor/off_loop.h"
#include "reactor/uvkj/repeating_timer.h"
#include "reactor/uvkj/uv_handle.h"
#include "reactor/worker_registry.h"
#include "schema/dispatcher.capnp.h"
#include "state/closure_endings.h"
#include "state/closure_planner.h"
#include "state/closure_requests.h"
#include "state/closure_updates.h"
#include "state/push_planner.h"
#include "state/refused_schedules.h"
#include "state/schedule_call_planner.h"

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
  uint64_t cancel_requested = 0;    // closures cancelled by Coordinator.cancel
  uint64_t cancelled_running = 0;   // of those, running ones (their worker told)
  uint64_t deadlines_exceeded = 0;  // closures failed by their deadline
  uint64_t late_reports_ignored = 0;  // reports for closures cancelled or timed out while running
  uint64_t refusals_repeated = 0;     // schedule calls answered with an earlier refusal
  uint64_t input_bytes_pushed = 0;  // input results read back and pushed to workers
  uint64_t inputs_over_limit = 0;   // closures failed: inputs over kMaxPushBytes
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
  // A heartbeat of `worker` announcing `slots` closure slots and the closure
  // `functions` it registered. `attached`: the first heartbeat on this link
  // (starts the staggered-start clock).
  void OnWorkerHeartbeat(const state::Worker& worker, uint32_t slots,
                         capnp::List<capnp::Text>::Reader functions, bool attached);
  // The worker is being removed (state::PlanWorkerRemoval decides what
  // becomes of its closures): nothing is assigned to it any more.
  void OnWorkerLost(uint64_t worker_id);
  // Queued closures no connected worker can run: none registered a function
  // they need (CountUnrunnable). They wait for one.
  uint64_t NumUnrunnable() const;
  // Closure slots the worker announced in its last heartbeat on its current
  // connection; 0 when it has none or is not attached.
  uint32_t SlotsOf(uint64_t worker_id) const {
    auto it = live_.find(worker_id);
    return it == live_.end() ? 0 : it->second.worker.slots;
  }
  // A worker's reports; resolves to how many were ignored (not running there
  // as that attempt, repeated, or ended while their result was written).
  // A result of DurableState::StoresResultInFile size is written to its
  // file on the thread pool first (storage/result_file.h); the promise
  // resolves once each such closure's finish is submitted (or ignored), so
  // the caller's reply, which then waits on Barrier(), still leaves only
  // after every outcome it carried is durable. Everything else is applied
  // before this returns.
  kj::Promise<uint32_t> Report(uint64_t worker_id, capnp::List<rpc::ClosureReport>::Reader reports);

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
  // One schedule call of `specs` for `coordinator_id`: plans it
  // (state::PlanScheduleCall over the refusals remembered and the pending
  // releases) and carries the plan out. nullopt: the call is to be scheduled
  // and holds no room yet (`has_room`: it holds a Room for its closures);
  // ask again once it does. Otherwise the plan, its Updates submitted (the
  // answer: its ids, or its refusal).
  Result<std::optional<state::ScheduleCallPlan>> ScheduleCall(
      uint64_t coordinator_id, capnp::List<rpc::ClosureSpec>::Reader specs, bool has_room);
  // Forgets finished, failed or cancelled closures of the coordinator. The
  // release is journaled with the next update that commits anyway, within
  // kReleaseDelayMs, or at once past kMaxPendingReleases; the caller makes it
  // durable before it acknowledges it (FlushReleases before its reply's
  // Barrier), so a release the coordinator saw acknowledged survives a crash
  // and no later session reports it again.
  // Exception: a closure that is the input of a closure not done yet is held
  // back (gone for the coordinator, kept in the state with its result, not
  // journaled) until its last dependant is done: its dependants' pushes read
  // its result. A crash before then forgets the held release: the outcome is
  // reported again to the coordinator (which dedups it, clients/closure_book).
  Status Release(uint64_t coordinator_id, capnp::List<uint64_t>::Reader closure_ids);
  // Journals the pending releases that are no longer held (also run at
  // shutdown, and every kReleaseDelayMs while some are pending). Only a
  // storage failure (logged) makes it fail.
  Status FlushReleases();
  // Not journaled yet, or held back (see Release): treated as gone.
  bool ReleasePending(uint64_t closure_id) const { return pending_releases_.contains(closure_id); }
  const state::SortedIdSet& pending_releases() const { return pending_releases_; }
  // Journals a per-worker resource and sends it to every worker with closure
  // slots once committed. A nonzero `request_id` already used by this
  // coordinator returns the resource it made (InvalidArgument if that one
  // has another function or args).
  Result<uint64_t> CreateResource(uint64_t coordinator_id, std::string_view function,
                                  std::string_view args, uint64_t request_id);
  // Cancels the queued or running closures of `closure_ids` (PlanCancel: all
  // or nothing, NotFound naming an unknown one) and tells the workers running
  // them; fills each id's state after the call.
  Status Cancel(uint64_t coordinator_id, capnp::List<uint64_t>::Reader closure_ids,
                std::vector<state::ClosureState>& states);
  // Cancels every closure of the coordinator that is not done, as Cancel
  // does each (state::PlanCancelCoordinator); how many it cancelled.
  Result<uint64_t> CancelCoordinator(uint64_t coordinator_id);
  // Raises the pending first error once: fills `error` and clears it.
  Status TakeFirstError(uint64_t coordinator_id, rpc::ClosureError::Builder error);
  const state::RefusedSchedules& refused_schedules() const { return refused_; }
  // The traced closures' stamps (ClosureSpec.trace); sessions take a trace
  // when they hand out its outcome.
  ClosureTraces& traces() { return traces_; }

  void AddSession(CoordinatorSession* session);
  void RemoveSession(CoordinatorSession* session);

 private:
  // What a connected worker's heartbeats said, and what its connection has had.
  struct LiveEntry {
    std::string address;
    state::LiveWorker worker;
    std::set<uint64_t> resources_sent;  // per-worker resources pushed on this connection
    // Replies to runClosures, kept until the next push: their release is the
    // Finish Cap'n Proto owes the worker, and sent with the next call it
    // costs the worker no wake-up and us no sendmsg of its own (one per
    // closure in a sequential round trip). One per push in flight at most.
    std::vector<capnp::Response<rpc::WorkerControl::RunClosuresResults>> push_replies;
  };
  struct RoomWaiter {
    uint64_t n = 0;
    kj::Own<kj::PromiseFulfiller<kj::Own<Room>>> fulfiller;
  };
  class ErrorHandler final : public kj::TaskSet::ErrorHandler {
   public:
    void taskFailed(kj::Exception&& exception) override;
  };

  // Report's synchronous part: applies every outcome but the results kept
  // in files, whose writes it starts and adds to `files` (true: ignored).
  Result<uint32_t> ReportNow(uint64_t worker_id, capnp::List<rpc::ClosureReport>::Reader reports,
                             std::vector<kj::Promise<bool>>& files);
  // Submits the updates finishing `results` (state::AddFinished; in HA mode
  // cut to result_bytes_per_commit) and calls `store(k)` right after the
  // update that finishes results[k], to store its bytes in the same pass.
  Status Finish(const std::vector<state::StoredResult>& results,
                const std::function<void(size_t)>& store);
  // Writes the result of `run` to its file on the thread pool, then, back on
  // the loop, finishes the closure if it still runs as that attempt
  // (OnResultFileWritten) or ends the run as a transient error when the
  // write failed (OnResultFileFailed). Resolves to true when ignored.
  kj::Promise<bool> StoreResultFile(state::ClosureRun run, capnp::Data::Reader bytes);
  bool OnResultFileWritten(const state::ClosureRun& run, uint64_t size, uint32_t crc);
  // Runs `work` (a result file write) on the thread pool, at most
  // kMaxFileWrites at a time, in the order asked.
  kj::Promise<std::string> RunFileWrite(std::function<std::string()> work);
  void StartFileWrites();
  bool OnResultFileFailed(const state::ClosureRun& run, uint64_t size, const std::string& error);
  // Removes result files on the thread pool; `when_durable`: once what was
  // submitted so far is durable (a release naming them), else at once (no
  // durable record names them).
  void RemoveResultFiles(std::vector<storage::ResultFileId> files, bool when_durable);
  // The time and record limit of the Updates built now.
  state::Stamp Stamp() const;
  // Submits the planned Updates in order (Observe hears of each as the
  // pipeline applies it); stops at the first refused one.
  Status Carry(const state::UpdateList& updates);
  // durable_.Submit of updates[i], with the bytes of its own message when
  // that is one segment (a copy instead of a traversal and a copy).
  Status Submit(const state::UpdateList& updates, size_t i);
  // What an applied Update did (the pipeline's applied observer, for every
  // update whoever carried it) means on the loop: the sessions of closures
  // that ended are woken, assignment runs again when a slot came free or a
  // closure joined the queue, waiting schedules when the queue shrank, the
  // counters count.
  void Observe(const state::Effects& effects);
  // The live workers as the planner sees them (connected ones only).
  std::vector<state::LiveWorker> LiveWorkers() const;
  // Runs AssignQueued once, later in this loop pass.
  void Kick();
  // Adds to tasks_. REQUIRES: not closed.
  void AddTask(kj::Promise<void> task);
  void AssignQueued();
  // The state's clock (CommitPipeline::clock), monotonic, in milliseconds:
  // what staggered starts are measured in.
  uint64_t MonotonicMs() const;
  // A closure to push as `run`, with its input results: views of bytes
  // kept by the caller until the push's message is built.
  struct PushItem {
    const state::Closure* closure;
    state::ClosureRun run;
    std::vector<kj::ArrayPtr<const char>> inputs;
  };
  // One runClosures call being built, and what it carries besides the
  // closures: the runs (ended as lost if it fails), the per-worker
  // resources the connection has not had, the traced closures.
  struct OutgoingPush {
    explicit OutgoingPush(capnp::Request<rpc::WorkerControl::RunClosuresParams,
                                         rpc::WorkerControl::RunClosuresResults>
                              request)
        : request(kj::mv(request)) {}
    capnp::Request<rpc::WorkerControl::RunClosuresParams, rpc::WorkerControl::RunClosuresResults>
        request;
    std::vector<state::ClosureRun> runs;
    std::set<uint64_t> resource_ids;
    std::vector<uint64_t> traced;
  };
  // Pushes the closures to their worker with the input results the plan
  // names (state::PlanPush). Inputs of kOffLoopReadBytes or more stored are
  // read on the thread pool first (PushAfterReadingInputs), the others on
  // the loop; a closure whose inputs do not fit one push or cannot be read
  // intact fails instead of running.
  kj::Promise<void> Push(uint64_t worker_id, std::vector<uint64_t> closure_ids);
  // Sends `items` in runClosures calls of at most kMaxPushBytes each.
  kj::Promise<void> SendPushes(uint64_t worker_id, const std::vector<PushItem>& items);
  // Fills an assignment of `push` from `from`, all but its inputs.
  void FillAssignment(rpc::ClosureAssignment::Builder item, const PushItem& from,
                      const LiveEntry& entry, OutgoingPush& push);
  // Adds the resources, stamps the traces and sends; a failed call ends the
  // push's runs as lost.
  kj::Promise<void> Send(uint64_t worker_id, OutgoingPush push);
  // Where a closure's inputs are: input k's stored result (a row committed
  // or a file: read work for the pool) is locations[*read_item[k]]; nullopt
  // when its bytes are at hand on the loop.
  struct InputLocations {
    std::vector<storage::ResultLocation> locations;
    std::vector<std::optional<size_t>> read_item;
    uint64_t stored_bytes = 0;  // of `locations`
  };
  InputLocations LocateInputs(const std::vector<uint64_t>& inputs) const;
  // The results of `inputs` (the plan's for closure `closure_id`), in order,
  // read on the loop; DataLoss when a stored one is missing or damaged
  // (InputError).
  Result<std::vector<std::string>> ReadInputs(uint64_t closure_id,
                                              const std::vector<uint64_t>& inputs);
  // Reads the run's `inputs` on the pool, then pushes it alone, their bytes
  // copied into the call in turns (CopyInTurns), unless it ended meanwhile.
  kj::Promise<void> PushAfterReadingInputs(uint64_t worker_id, state::ClosureRun run,
                                           std::vector<uint64_t> inputs, InputLocations where);
  kj::Promise<void> SendWithInputsInTurns(uint64_t worker_id, PushItem item);
  // `status` of input `input_id`, naming it and its dependant.
  static Status InputError(uint64_t closure_id, uint64_t input_id, const Status& status);
  // Fails the run (a user error: retrying cannot help) because of its inputs.
  void FailOnInputs(const state::ClosureRun& run, const Status& why);
  // Pushes the committed per-worker resources this worker's connection has
  // not had yet and can build (no closures), so that it builds them at once.
  void SendResources(uint64_t worker_id);
  // The push of these runs to the worker failed: those still running there
  // as the same attempt end as lost runs.
  void PushFailed(uint64_t worker_id, const std::vector<state::ClosureRun>& runs);
  // Tells each worker (best effort, once its update commits) to drop the
  // closures of its list: cancelled or timed out while it ran them.
  void TellEnded(const std::map<uint64_t, std::vector<uint64_t>>& running);
  // Journals a cancel's updates, counts them and tells the workers.
  Status CarryCancel(const state::EndingPlan& plan);
  // Arms the deadline timer for the earliest deadline of a queued or running
  // closure, unless it is armed for that one or an earlier one already.
  void ArmDeadlineTimer();
  // The timer fired: the planner fails every closure past its deadline.
  void OnDeadlines();
  static void OnDeadlineTimer(uv_timer_t* handle);
  void NotifyDone(uint64_t coordinator_id, uint64_t closure_id);
  void NotifyError(uint64_t coordinator_id);
  void WakeRoomWaiters();
  // Runs FlushReleases within kReleaseDelayMs (and again while some are held).
  void StartReleaseTimer();
  kj::Own<Room> Reserve(uint64_t n);
  void ReleaseRoom(uint64_t n);
  uint64_t QueuedOrReserved() const;

  uv_loop_t* const loop_;
  DurableState& durable_;
  // Observe, registered with the pipeline from construction until Close.
  std::optional<CommitPipeline::ObserverId> observer_;
  // Result file writes running on the pool, counted with DurableState: its
  // fsyncs stay off the loop meanwhile. Declared before tasks_, whose
  // writes lower it as they end.
  const std::shared_ptr<uint64_t> durable_file_writes_;
  WorkerRegistry& workers_;
  const ClosureOptions options_;
  std::map<uint64_t, LiveEntry> live_;     // by worker id
  uint64_t workers_attached_ = 0;          // for the staggered start
  uint64_t next_worker_turn_ = 0;          // round robin start among workers
  bool kick_pending_ = false;
  static constexpr uint64_t kReleaseDelayMs = 10;
  // Most closure bytes in one runClosures push (state/push_planner.h).
  static constexpr size_t kMaxPushBytes = state::kMaxPushBytes;
  static constexpr size_t kMaxPendingReleases = 4096;
  bool closed_ = false;
  state::SortedIdSet pending_releases_;
  state::RefusedSchedules refused_;
  ClosureTraces traces_;
  std::unique_ptr<uvkj::UvRepeatingTimer> release_timer_;
  // Closures pushed under the current commit hold whose reports are awaited.
  std::set<uint64_t> awaiting_reports_;
  uint64_t reserved_ = 0;                  // room admitted to waiting schedules
  std::deque<RoomWaiter> room_waiters_;
  std::multimap<uint64_t, CoordinatorSession*> sessions_;  // by coordinator id
  ClosureCounters counters_;
  std::unique_ptr<uvkj::UvRepeatingTimer> stagger_timer_;
  // One timer for every closure deadline, armed at the earliest one (a
  // timer per closure would cost a libuv handle each); 0: not armed.
  uvkj::UvHandle<uv_timer_t> deadline_timer_;
  int64_t deadline_armed_micros_ = 0;
  ErrorHandler error_handler_;
  // Pushes, barriers and kicks in flight; dropped by Close() (pushes hold
  // worker capabilities, which must go before the connections do).
  kj::Own<kj::TaskSet> tasks_;
  // The sessions' calls waiting on us (CancelOnClose).
  kj::Canceler session_calls_;
  // Runs (closure id, attempt) whose result file is being written: a second
  // report of one is ignored (two writers of one file would interleave). By
  // run, not closure: a write of an attempt that has ended (its worker lost)
  // must not shut out the report of the attempt that runs it now.
  std::set<std::pair<uint64_t, uint32_t>> writing_results_;
  // Result file writes run one at a time: libuv's pool has 4 threads, and
  // the snapshot replica, a checkpoint and the WAL fsync every reply waits
  // for may need three of them; a burst of writes (each ending in an
  // fdatasync of up to 32 MiB) must not queue that fsync behind it.
  static constexpr size_t kMaxFileWrites = 1;
  struct QueuedFileWrite {
    std::function<std::string()> work;
    kj::Own<kj::PromiseFulfiller<std::string>> fulfiller;
  };
  std::deque<QueuedFileWrite> file_writes_queued_;
  size_t file_writes_running_ = 0;
  // The copies of results on their way to their files: up to two results of
  // the largest size, at most 64 MiB, kept faulted in for the next ones
  // (BufferCache).
  BufferCache copy_buffers_{std::min<uint64_t>(2 * options_.max_result_bytes, 64u << 20)};
  // Result file writes and removals on the thread pool; declared last, so
  // destroyed first: jobs in flight are given up (their files, if any, are
  // removed by the next start).
  OffLoop result_files_{loop_};
};

}  // namespace dispatch::reactor
