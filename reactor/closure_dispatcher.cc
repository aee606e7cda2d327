#include "reactor/closure_dispatcher.h"

#include <kj/debug.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <set>
#include <utility>

#include "common/checksum.h"
#include "common/rpc_status.h"
#include "common/closure_limits.h"
#include "common/log.h"
#include "reactor/coordinator_session.h"
#include "reactor/service_util.h"
#include "state/closure_requests.h"

namespace dispatch::reactor {

void ClosureDispatcher::ErrorHandler::taskFailed(kj::Exception&& exception) {
  Log(LogLevel::kWarning, "closure dispatch task failed: ", exception.getDescription());
}

ClosureDispatcher::ClosureDispatcher(uv_loop_t* loop, DurableState& durable,
                                     WorkerRegistry& workers, ClosureOptions options)
    : loop_(loop),
      durable_(durable),
      durable_file_writes_(durable.results().pool_file_writes()),
      workers_(workers),
      options_(options),
      deadline_timer_(loop, this, uv_timer_init),
      tasks_(kj::heap<kj::TaskSet>(error_handler_)) {
  observer_ = durable_.pipeline().AddAppliedObserver(
      [this](const state::Effects& effects) { Observe(effects); });
  uv_unref(deadline_timer_.base());  // never keeps the loop alive on its own
  const uint64_t delay = options_.policy.start_delay_ms;
  if (delay > 0) {
    // Looks again for workers whose staggered start is over.
    stagger_timer_ = std::make_unique<uvkj::UvRepeatingTimer>(
        loop_, std::max<uint64_t>(10, std::min<uint64_t>(delay / 4, 250)), [this]() { Kick(); });
    stagger_timer_->Unref();
    stagger_timer_->Start();
  }
}

ClosureDispatcher::Room::~Room() { owner_->ReleaseRoom(n_); }

// Every session and room holds a reference: none is left by now.
ClosureDispatcher::~ClosureDispatcher() noexcept(false) { Close(); }

void ClosureDispatcher::Close() {
  if (closed_) return;
  closed_ = true;
  if (observer_.has_value()) durable_.pipeline().RemoveAppliedObserver(*observer_);
  observer_.reset();
  // Schedules waiting for room fail (their fulfillers go) and wait no more:
  // a room the cancellations below return wakes nobody.
  room_waiters_.clear();
  // Destroys the waiting session calls now (kj::Canceler's guarantee), and
  // with them the rooms they hold; their callers see Unavailable.
  session_calls_.cancel(
      ExceptionFromStatus(UnavailableError("the dispatcher is shutting down")));
  tasks_ = nullptr;
  file_writes_queued_.clear();  // their calls were cancelled above
  release_timer_.reset();
  stagger_timer_.reset();
  deadline_timer_.reset();
}

Status ClosureDispatcher::Start() {
  DISPATCH_RETURN_IF_ERROR(Carry(state::PlanRecovery(state(), Stamp())));
  ArmDeadlineTimer();  // deadlines are journaled: they run on across a restart
  return Status::Ok();
}

// ---- Carrying out Updates ---------------------------------------------------

state::Stamp ClosureDispatcher::Stamp() const {
  return state::Stamp{durable_.pipeline().NowMicros(), durable_.pipeline().max_record_bytes()};
}

Status ClosureDispatcher::Carry(const state::UpdateList& updates) {
  for (size_t i = 0; i < updates.size(); ++i) DISPATCH_RETURN_IF_ERROR(Submit(updates, i));
  return Status::Ok();
}

Status ClosureDispatcher::Submit(const state::UpdateList& updates, size_t i) {
  std::optional<std::string> bytes = updates.EncodedIfOneSegment(i);
  return bytes.has_value() ? durable_.pipeline().Submit(updates[i], std::move(*bytes))
                           : durable_.pipeline().Submit(updates[i]);
}

void ClosureDispatcher::Observe(const state::Effects& effects) {
  if (!effects.scheduled.empty()) {
    counters_.scheduled += effects.scheduled.size();
    ArmDeadlineTimer();
  }
  for (const state::PutBack& put_back : effects.put_back)
    ++(put_back.transient ? counters_.transient_retries : counters_.put_back);
  for (const state::ClosureEnded& ended : effects.ended) {
    if (ended.outcome == state::ClosureState::FINISHED) ++counters_.results_accepted;
    if (ended.infrastructure) ++counters_.attempts_exhausted;
    if (ended.deadline_exceeded) ++counters_.deadlines_exceeded;
    NotifyDone(ended.coordinator_id, ended.closure_id);
  }
  for (const state::FirstError& error : effects.first_errors) NotifyError(error.coordinator_id);
  counters_.released += effects.released.size();
  if (effects.queue_shrank) WakeRoomWaiters();
  // None live (at start-up, before any worker is heard from): nothing to
  // assign to; the first heartbeat kicks.
  if ((!effects.runs_ended.empty() || !effects.queued.empty()) && !live_.empty()) Kick();
}

// ---- Workers ---------------------------------------------------------------

void ClosureDispatcher::OnWorkerHeartbeat(const state::Worker& worker, uint32_t slots,
                                          capnp::List<capnp::Text>::Reader functions,
                                          bool attached) {
  auto [it, inserted] = live_.try_emplace(worker.id);
  LiveEntry& entry = it->second;
  if (attached) {
    // A new link: the worker drops the outcomes of closures pushed on its
    // earlier connections (ClosureRunner), so those runs are lost. Without
    // this, a worker that reconnected before we saw its old connection end
    // kept them assigned forever (found by tests/sim, pinned seeds 27, 216,
    // 226, 255).
    Status lost = Carry(state::PlanWorkerLost(
        state(), options_.policy, worker.id,
        "it reconnected; closures pushed on its earlier connection are dropped", Stamp()));
    if (!lost.ok()) Log(LogLevel::kWarning, "closure retry: ", lost.ToString().c_str());
  }
  if (inserted || attached) {
    entry.address = worker.address;
    entry.worker.worker_id = worker.id;
    entry.worker.eligible_at_ms =
        MonotonicMs() + state::StartDelayMs(options_.policy, workers_attached_++);
    entry.resources_sent.clear();  // a new connection, maybe a new process
  }
  // A worker registers its functions before it starts, so the list changes
  // only with a new process; compared, not rebuilt, on every heartbeat.
  const state::FunctionSet* known = entry.worker.functions.get();
  bool same = known != nullptr && known->size() == functions.size();
  for (auto it = functions.begin(); same && it != functions.end(); ++it)
    same = known->find(View(*it)) != known->end();
  const bool new_functions = !same;
  if (new_functions) {
    auto set = std::make_shared<state::FunctionSet>();
    for (auto function : functions) set->emplace(View(function));
    entry.worker.functions = std::move(set);
  }
  const bool more = slots > entry.worker.slots || entry.worker.paused || new_functions;
  entry.worker.slots = slots;
  entry.worker.paused = false;
  if ((inserted || attached || more) && slots > 0) {
    SendResources(worker.id);
    Kick();
  }
}

void ClosureDispatcher::OnWorkerLost(uint64_t worker_id) { live_.erase(worker_id); }

std::vector<state::LiveWorker> ClosureDispatcher::LiveWorkers() const {
  std::vector<state::LiveWorker> workers;
  workers.reserve(live_.size());
  for (const auto& [worker_id, entry] : live_) {
    if (workers_.IsConnected(entry.address)) workers.push_back(entry.worker);
  }
  return workers;
}

uint64_t ClosureDispatcher::NumUnrunnable() const {
  return state::CountUnrunnable(state(), LiveWorkers());
}

kj::Promise<uint32_t> ClosureDispatcher::Report(uint64_t worker_id,
                                                capnp::List<rpc::ClosureReport>::Reader reports) {
  std::vector<kj::Promise<bool>> files;
  Result<uint32_t> ignored = ReportNow(worker_id, reports, files);
  if (!ignored.ok()) return ExceptionFromStatus(ignored.status());
  if (files.empty()) return *ignored;
  auto builder = kj::heapArrayBuilder<kj::Promise<bool>>(files.size());
  for (auto& file : files) builder.add(kj::mv(file));
  return kj::joinPromises(builder.finish()).then([n = *ignored](kj::Array<bool> late) {
    uint32_t total = n;
    for (bool ignored_late : late) total += ignored_late ? 1 : 0;
    return total;
  });
}

Result<uint32_t> ClosureDispatcher::ReportNow(uint64_t worker_id,
                                              capnp::List<rpc::ClosureReport>::Reader reports,
                                              std::vector<kj::Promise<bool>>& files) {
  const state::ClosurePolicy& policy = options_.policy;
  uint32_t ignored = 0;
  // A closure reported twice in one call counts once; `seen` is kept only
  // when some id repeats.
  std::vector<uint64_t> ids;
  ids.reserve(reports.size());
  for (rpc::ClosureReport::Reader report : reports) ids.push_back(report.getClosureId());
  const bool repeats = state::RepeatedId(std::move(ids)).has_value();
  state::IdSet seen;
  std::vector<state::StoredResult> results;
  std::vector<capnp::Data::Reader> result_bytes;  // results[i]'s bytes
  for (rpc::ClosureReport::Reader report : reports) {
    const state::ClosureRun run{report.getClosureId(), worker_id, report.getAttempt()};
    if (state().FindRunning(run.closure_id, run.worker_id, run.attempt) == nullptr ||
        (repeats && !seen.insert(run.closure_id).second) ||
        writing_results_.contains({run.closure_id, run.attempt})) {
      ++ignored;  // late, repeated, or from a worker incarnation that lost it
      const state::Closure* ended = state().FindClosure(run.closure_id);
      if (ended != nullptr && ended->attempts == run.attempt &&
          (ended->state == state::ClosureState::CANCELLED ||
           (ended->state == state::ClosureState::FAILED && ended->deadline_micros != 0))) {
        ++counters_.late_reports_ignored;  // cancelled or timed out while it ran
      }
      continue;
    }
    if (!traces_.empty() && traces_.Traced(run.closure_id))
      traces_.OnReport(run.closure_id, report.getTrace(), uv_hrtime());
    switch (report.which()) {
      case rpc::ClosureReport::RESULT: {
        // Read once: every read of a Data field counts against the
        // message's traversal limit, and a result may be half of it.
        capnp::Data::Reader bytes = report.getResult();
        if (bytes.size() > options_.max_result_bytes) {
          // Refused here too (a worker that ignores the limit it was told),
          // never journaled: the closure fails with the limit in its error.
          ++counters_.results_over_limit;
          DISPATCH_RETURN_IF_ERROR(Carry(state::PlanUserError(
              state(), run,
              ResultOverLimitError(run.closure_id, bytes.size(), options_.max_result_bytes),
              Stamp())));
          break;
        }
        if (durable_.results().StoresResultInFile(bytes.size())) {
          files.push_back(StoreResultFile(run, bytes));
          break;
        }
        results.push_back({run, bytes.size(), Crc32c(bytes.begin(), bytes.size())});
        result_bytes.push_back(bytes);
        break;
      }
      case rpc::ClosureReport::USER_ERROR: {
        std::string message = BoundedErrorText(View(report.getUserError()));
        if (message.empty()) message = "the function failed without a message";
        DISPATCH_RETURN_IF_ERROR(Carry(state::PlanUserError(state(), run, message, Stamp())));
        break;
      }
      case rpc::ClosureReport::TRANSIENT_ERROR:
        DISPATCH_RETURN_IF_ERROR(Carry(
            state::PlanRunEnded(state(), policy, run, state::RunEnd::kTransientError,
                                BoundedErrorText(View(report.getTransientError())), Stamp())));
        break;
      case rpc::ClosureReport::UNAVAILABLE: {
        auto entry = live_.find(worker_id);
        if (entry != live_.end()) entry->second.worker.paused = true;
        DISPATCH_RETURN_IF_ERROR(Carry(state::PlanRunEnded(
            state(), policy, run, state::RunEnd::kWorkerLost,
            "its worker is unavailable: " + BoundedErrorText(View(report.getUnavailable())),
            Stamp())));
        break;
      }
    }
  }
  if (!results.empty()) {
    DISPATCH_RETURN_IF_ERROR(Finish(results, [&](size_t k) {
      capnp::Data::Reader bytes = result_bytes[k];
      if (bytes.size() == 0) return;  // an empty result needs no row
      durable_.results().PutResult(results[k].run.closure_id,
                         std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
    }));
  }
  counters_.reports_ignored += ignored;
  if (!awaiting_reports_.empty()) {
    for (rpc::ClosureReport::Reader report : reports) awaiting_reports_.erase(report.getClosureId());
    if (awaiting_reports_.empty()) durable_.pipeline().ReleaseHold();  // everything expected is in
  }
  Kick();  // their slots are free
  return ignored;
}

Status ClosureDispatcher::Finish(const std::vector<state::StoredResult>& results,
                                 const std::function<void(size_t)>& store) {
  (void)FlushReleases();  // they share this pass's commit (a failure is logged)
  // The records carry only ids, sizes and checksums; the bytes go to the
  // result table in the same transaction, or are in their file already.
  state::UpdateList finished;
  const size_t budget = durable_.results().result_bytes_per_commit();
  if (budget == 0) {
    state::AddFinished(finished, Stamp(), results);
  } else {
    // HA mode: a record's results ride in the same etcd transaction as
    // the record, so the results one record finishes are cut to the budget.
    for (size_t begin = 0; begin < results.size();) {
      size_t end = begin;
      size_t bytes = 0;
      while (end < results.size() && (end == begin || bytes + results[end].size <= budget)) {
        bytes += results[end++].size;
      }
      state::AddFinished(finished, Stamp(),
                         std::vector<state::StoredResult>(results.begin() + begin, results.begin() + end));
      begin = end;
    }
  }
  size_t next = 0;
  for (size_t i = 0; i < finished.size(); ++i) {
    if (budget != 0) {
      size_t bytes = finished[i].totalSize().wordCount * 8;
      const size_t n = finished[i].getClosureBatch().getFinished().size();
      for (size_t k = next; k < next + n; ++k) bytes += results[k].size;
      DISPATCH_RETURN_IF_ERROR(durable_.pipeline().MakeRoom(bytes));
    }
    // Observe wakes the sessions before the results are stored, but only
    // through promises: none reads a result before this pass stores it.
    DISPATCH_RETURN_IF_ERROR(Submit(finished, i));
    for (size_t n = finished[i].getClosureBatch().getFinished().size(); n > 0; --n, ++next) {
      store(next);
    }
  }
  return Status::Ok();
}

// ---- Assignment ------------------------------------------------------------

void ClosureDispatcher::AddTask(kj::Promise<void> task) {
  KJ_REQUIRE(!closed_, "closure work started after the dispatcher was closed");
  tasks_->add(kj::mv(task));
}

void ClosureDispatcher::Kick() {
  if (kick_pending_) return;
  kick_pending_ = true;
  // Later in this pass (before its group commit), so that every schedule and
  // report of the pass is assigned in one batch.
  AddTask(kj::evalLater([this]() {
    kick_pending_ = false;
    AssignQueued();
  }));
}

uint64_t ClosureDispatcher::MonotonicMs() const {
  return durable_.pipeline().clock().MonotonicNanos() / 1000000;
}

void ClosureDispatcher::AssignQueued() {
  if (state().NumClosuresInState(state::ClosureState::QUEUED) == 0 || live_.empty()) return;
  state::AssignmentPlan plan =
      state::PlanAssignments(state(), LiveWorkers(), MonotonicMs(), next_worker_turn_++, Stamp());
  // Should a record be refused, those before it are assigned and pushed; the
  // rest stay queued (Push skips closures not assigned there).
  size_t submitted = 0;
  for (; submitted < plan.updates.size(); ++submitted) {
    Status status = Submit(plan.updates, submitted);
    if (!status.ok()) {
      Log(LogLevel::kWarning, "could not assign closures: ", status.ToString().c_str());
      break;
    }
  }
  if (submitted == 0) return;
  std::map<uint64_t, std::vector<uint64_t>> per_worker;
  for (const state::ClosureRun& run : plan.runs)
    per_worker[run.worker_id].push_back(run.closure_id);
  if (options_.commit_hold_us > 0) {
    // Push now and hold the commit for the reports (see ClosureOptions).
    if (!durable_.pipeline().holding()) awaiting_reports_.clear();
    durable_.pipeline().HoldCommit(options_.commit_hold_us);
    for (auto& [worker_id, ids] : per_worker) {
      awaiting_reports_.insert(ids.begin(), ids.end());
      AddTask(Push(worker_id, kj::mv(ids)));
    }
    return;
  }
  for (auto& [worker_id, ids] : per_worker) {
    // The worker hears of its closures only once their assignment is durable.
    // (Init-captures: clang 14, which builds the fuzzers, cannot capture a
    // structured binding by name.)
    AddTask(durable_.pipeline().Barrier().then([this, worker_id = worker_id, ids = kj::mv(ids)]() mutable {
      return Push(worker_id, kj::mv(ids));
    }));
  }
}

void ClosureDispatcher::PushFailed(uint64_t worker_id, const std::vector<state::ClosureRun>& runs) {
  ++counters_.pushes_failed;
  for (const state::ClosureRun& run : runs) {
    // Already ended (its worker was removed) or done: nothing to do.
    if (state().FindRunning(run.closure_id, worker_id, run.attempt) == nullptr) continue;
    Status status =
        Carry(state::PlanRunEnded(state(), options_.policy, run, state::RunEnd::kWorkerLost,
                                  "the push to its worker failed", Stamp()));
    if (!status.ok()) Log(LogLevel::kWarning, "closure retry: ", status.ToString().c_str());
  }
}

// ---- Coordinators ----------------------------------------------------------

uint64_t ClosureDispatcher::QueuedOrReserved() const {
  // Waiting closures count: they become queued without asking for room.
  return state().NumClosuresInState(state::ClosureState::QUEUED) +
         state().NumClosuresInState(state::ClosureState::WAITING) + reserved_;
}

kj::Own<ClosureDispatcher::Room> ClosureDispatcher::Reserve(uint64_t n) {
  reserved_ += n;
  return kj::heap<Room>(kj::addRef(*this), n);
}

kj::Promise<kj::Own<ClosureDispatcher::Room>> ClosureDispatcher::WaitForRoom(uint64_t n) {
  // A batch larger than the whole bound still goes through, alone.
  if (room_waiters_.empty() &&
      (QueuedOrReserved() + n <= options_.max_queued_closures || QueuedOrReserved() == 0)) {
    return Reserve(n);
  }
  ++counters_.schedule_waits;
  auto paf = kj::newPromiseAndFulfiller<kj::Own<Room>>();
  room_waiters_.push_back(RoomWaiter{n, kj::mv(paf.fulfiller)});
  return kj::mv(paf.promise);
}

void ClosureDispatcher::ReleaseRoom(uint64_t n) {
  reserved_ -= std::min(reserved_, n);
  WakeRoomWaiters();
}

void ClosureDispatcher::WakeRoomWaiters() {
  while (!room_waiters_.empty()) {
    RoomWaiter& head = room_waiters_.front();
    if (!head.fulfiller->isWaiting()) {  // its call was cancelled
      room_waiters_.pop_front();
      continue;
    }
    if (QueuedOrReserved() + head.n > options_.max_queued_closures && QueuedOrReserved() != 0)
      return;
    head.fulfiller->fulfill(Reserve(head.n));
    room_waiters_.pop_front();
  }
}

// The schedule's closures as the planners take them. Each field is read
// once: the RPC server's traversal limit is the message size limit, so a
// schedule near that size can be read only once.
static std::vector<state::NewClosure> NewClosuresOf(capnp::List<rpc::ClosureSpec>::Reader specs) {
  std::vector<state::NewClosure> closures;
  closures.reserve(specs.size());
  for (auto spec : specs) {
    closures.push_back(state::NewClosure{0, spec.getFunction(), spec.getArgs(),
                                         state::ResourcesOf(spec), spec.getRequestId(),
                                         spec.getPriority(), spec.getTimeoutMs()});
    for (uint64_t input : state::InputsOf(spec)) closures.back().inputs.push_back(input);
  }
  return closures;
}

namespace {

std::vector<uint64_t> RequestIdsOf(capnp::List<rpc::ClosureSpec>::Reader specs) {
  std::vector<uint64_t> ids;
  ids.reserve(specs.size());
  for (auto spec : specs) ids.push_back(spec.getRequestId());
  return ids;
}

}  // namespace

Result<std::optional<state::ScheduleCallPlan>> ClosureDispatcher::ScheduleCall(
    uint64_t coordinator_id, capnp::List<rpc::ClosureSpec>::Reader specs, bool has_room) {
  state::ScheduleCallRequest request;
  request.coordinator_id = coordinator_id;
  request.request_ids = RequestIdsOf(specs);
  request.closures = [specs] { return NewClosuresOf(specs); };
  request.has_room = has_room;
  Result<state::ScheduleCallPlan> plan = state::PlanScheduleCall(
      state(), refused_, pending_releases_, request, Stamp(), options_.policy);
  if (!plan.ok()) return plan.status();
  switch (plan->route) {
    case state::ScheduleRoute::kNeedsRoom:
      return std::optional<state::ScheduleCallPlan>();
    case state::ScheduleRoute::kScheduled:
      for (unsigned i = 0; i < specs.size() && i < plan->ids.size(); ++i) {
        // A pointer test per closure: reading a list counts against the
        // message's traversal limit, testing for one does not.
        if (specs[i].hasTrace()) traces_.Start(plan->ids[i], specs[i].getTrace(), uv_hrtime());
      }
      break;
    case state::ScheduleRoute::kRefusedAgain:
      ++counters_.refusals_repeated;
      break;
    case state::ScheduleRoute::kRetried:
    case state::ScheduleRoute::kRefused:
      break;
  }
  // The releases share this pass's commit (a failure is logged).
  if (plan->num_new > 0) (void)FlushReleases();
  // Should the process die between two records' commits (before the reply),
  // a retry with the same request ids queues only the rest.
  DISPATCH_RETURN_IF_ERROR(Carry(plan->updates));
  if (plan->record_refusal) refused_.Record(coordinator_id, request.request_ids, plan->refusal);
  return std::optional<state::ScheduleCallPlan>(std::move(*plan));
}

Status ClosureDispatcher::Release(uint64_t coordinator_id,
                                  capnp::List<uint64_t>::Reader closure_ids) {
  std::vector<uint64_t> asked;
  asked.reserve(closure_ids.size());
  for (uint64_t id : closure_ids) asked.push_back(id);
  Result<std::vector<uint64_t>> release =
      state::PlanRelease(state(), coordinator_id, asked, pending_releases_);
  if (!release.ok()) return release.status();
  pending_releases_.Insert(release->begin(), release->end());
  if (pending_releases_.size() >= kMaxPendingReleases) return FlushReleases();
  if (!pending_releases_.empty()) StartReleaseTimer();
  return Status::Ok();
}

void ClosureDispatcher::StartReleaseTimer() {
  if (closed_) return;
  if (release_timer_ == nullptr) {
    release_timer_ = std::make_unique<uvkj::UvRepeatingTimer>(loop_, kReleaseDelayMs,
                                                              [this]() { (void)FlushReleases(); });
    release_timer_->Unref();
  }
  release_timer_->Start();
}

Status ClosureDispatcher::FlushReleases() {
  if (release_timer_ != nullptr) release_timer_->Stop();
  state::ReleaseFlushPlan plan = state::PlanReleaseFlush(state(), pending_releases_, Stamp());
  pending_releases_.clear();
  pending_releases_.Insert(plan.held.begin(), plan.held.end());
  // Held ones are looked at again every kReleaseDelayMs until they go.
  if (!pending_releases_.empty()) StartReleaseTimer();
  for (size_t i = 0; i < plan.updates.size(); ++i) {
    Status status = Submit(plan.updates, i);
    if (!status.ok()) {
      Log(LogLevel::kWarning, "could not release closures: ", status.ToString().c_str());
      return status;
    }
    std::vector<storage::ResultFileId> files;
    for (uint64_t id : plan.updates[i].getClosureBatch().getReleased()) {
      if (std::binary_search(plan.stored.begin(), plan.stored.end(), id)) {
        if (auto file = durable_.results().DeleteResult(id)) files.push_back(*file);
      }
      if (!traces_.empty()) traces_.Forget(id);
    }
    RemoveResultFiles(std::move(files), /*when_durable=*/true);
  }
  return Status::Ok();
}

Result<uint64_t> ClosureDispatcher::CreateResource(uint64_t coordinator_id,
                                                   std::string_view function,
                                                   std::string_view args, uint64_t request_id) {
  Result<state::ResourcePlan> plan =
      state::PlanResource(state(), coordinator_id, function, args, request_id, Stamp());
  if (!plan.ok()) return plan.status();
  if (plan->updates.empty()) return plan->resource_id;  // made before
  DISPATCH_RETURN_IF_ERROR(Carry(plan->updates));
  // Every worker builds its component now, not when a closure first needs it.
  for (const auto& [worker_id, entry] : live_) {
    if (entry.worker.slots > 0) SendResources(worker_id);
  }
  return plan->resource_id;
}

Status ClosureDispatcher::TakeFirstError(uint64_t coordinator_id,
                                         rpc::ClosureError::Builder error) {
  std::optional<state::TakenFirstError> taken =
      state::PlanTakeFirstError(state(), coordinator_id, Stamp());
  if (!taken) return Status::Ok();
  error.setClosureId(taken->closure_id);
  error.setMessage(taken->message);
  return Carry(taken->updates);
}

void ClosureDispatcher::AddSession(CoordinatorSession* session) {
  sessions_.emplace(session->coordinator_id(), session);
}

void ClosureDispatcher::RemoveSession(CoordinatorSession* session) {
  auto [begin, end] = sessions_.equal_range(session->coordinator_id());
  for (auto it = begin; it != end; ++it) {
    if (it->second == session) {
      sessions_.erase(it);
      return;
    }
  }
}

void ClosureDispatcher::NotifyDone(uint64_t coordinator_id, uint64_t closure_id) {
  auto [begin, end] = sessions_.equal_range(coordinator_id);
  for (auto it = begin; it != end; ++it) it->second->OnClosureDone(closure_id);
}

void ClosureDispatcher::NotifyError(uint64_t coordinator_id) {
  auto [begin, end] = sessions_.equal_range(coordinator_id);
  for (auto it = begin; it != end; ++it) it->second->OnFirstError();
}

}  // namespace dispatch::reactor
