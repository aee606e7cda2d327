#include "reactor/closure_dispatcher.h"

#include <capnp/message.h>
#include <kj/debug.h>

#include <algorithm>
#include <set>
#include <utility>

#include "common/checksum.h"
#include "common/closure_limits.h"
#include "common/log.h"
#include "reactor/coordinator_session.h"
#include "reactor/record_budget.h"
#include "reactor/service_util.h"
#include "state/bytes.h"

namespace dispatch::reactor {
namespace {

std::string Name(uint64_t closure_id) { return "closure " + std::to_string(closure_id); }

}  // namespace

void ClosureDispatcher::ErrorHandler::taskFailed(kj::Exception&& exception) {
  Log(LogLevel::kWarning, "closure dispatch task failed: ", exception.getDescription());
}

ClosureDispatcher::ClosureDispatcher(uv_loop_t* loop, DurableState& durable,
                                     WorkerRegistry& workers, ClosureOptions options)
    : loop_(loop),
      durable_(durable),
      workers_(workers),
      options_(options),
      tasks_(kj::heap<kj::TaskSet>(error_handler_)) {
  if (options_.start_delay_ms > 0) {
    // Looks again for workers whose staggered start is over.
    stagger_timer_ = std::make_unique<uvkj::UvRepeatingTimer>(
        loop_, std::max<uint64_t>(10, std::min<uint64_t>(options_.start_delay_ms / 4, 250)),
        [this]() { Kick(); });
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
  // Schedules waiting for room fail (their fulfillers go) and wait no more:
  // a room the cancellations below return wakes nobody.
  room_waiters_.clear();
  // Destroys the waiting session calls now (kj::Canceler's guarantee), and
  // with them the rooms they hold; their callers see Unavailable.
  session_calls_.cancel(
      ExceptionFromStatus(UnavailableError("the dispatcher is shutting down")));
  tasks_ = nullptr;
  release_timer_.reset();
  stagger_timer_.reset();
}

Status ClosureDispatcher::Start() {
  for (const state::Closure* closure : state().ClosuresInState(state::ClosureState::ASSIGNED)) {
    capnp::MallocMessageBuilder message;
    auto update = message.initRoot<journal::Update>();
    update.setTimeMicros(durable_.NowMicros());
    auto put_back = update.initClosurePutBack();
    put_back.setClosureId(closure->id);
    put_back.setWorkerId(closure->worker_id);
    put_back.setAttempt(closure->attempts);
    DISPATCH_RETURN_IF_ERROR(durable_.Submit(update));
    ++counters_.put_back;
  }
  return Status::Ok();
}

// ---- Workers ---------------------------------------------------------------

void ClosureDispatcher::OnWorkerHeartbeat(const state::Worker& worker, uint32_t slots,
                                          bool attached) {
  auto [it, inserted] = slots_.try_emplace(worker.id);
  WorkerSlots& entry = it->second;
  if (inserted || attached) {
    entry.address = worker.address;
    uint64_t delay = options_.start_delay_ms;
    if (options_.start_delay_max_ms != 0)
      delay = std::min(options_.start_delay_ms * workers_attached_, options_.start_delay_max_ms);
    ++workers_attached_;
    entry.eligible_at_ms = uv_now(loop_) + delay;
  }
  if (inserted || attached) entry.resources_sent.clear();  // a new connection, maybe a new process
  const bool more = slots > entry.slots || entry.paused;
  entry.slots = slots;
  entry.paused = false;
  if ((inserted || attached || more) && slots > 0) {
    SendResources(worker.id);
    Kick();
  }
}

Status ClosureDispatcher::OnWorkerLost(uint64_t worker_id, const std::string& reason) {
  slots_.erase(worker_id);
  for (const state::Closure* closure : state().ClosuresOnWorker(worker_id)) {
    DISPATCH_RETURN_IF_ERROR(Retry(*closure, false, "its worker was lost (" + reason + ")"));
  }
  return Status::Ok();
}

Status ClosureDispatcher::Retry(const state::Closure& closure, bool transient,
                                const std::string& why) {
  const uint64_t max_attempts = options_.max_closure_attempts;
  if (transient && closure.transient_failures >= options_.transient_retries) {
    return Fail(closure.id, closure.worker_id, closure.attempts,
                Name(closure.id) + " failed with a transient error " +
                    std::to_string(closure.transient_failures + 1) + " times (limit " +
                    std::to_string(options_.transient_retries) + " retries): " + why,
                false);
  }
  if (max_attempts != 0 && closure.attempts >= max_attempts) {
    ++counters_.attempts_exhausted;
    return Fail(closure.id, closure.worker_id, closure.attempts,
                Name(closure.id) + " ran " + std::to_string(closure.attempts) +
                    " times (max_closure_attempts " + std::to_string(max_attempts) +
                    ") and was not retried: " + why,
                false);
  }
  capnp::MallocMessageBuilder message;
  auto update = message.initRoot<journal::Update>();
  update.setTimeMicros(durable_.NowMicros());
  auto put_back = update.initClosurePutBack();
  put_back.setClosureId(closure.id);
  put_back.setWorkerId(closure.worker_id);
  put_back.setAttempt(closure.attempts);
  put_back.setTransient(transient);
  DISPATCH_RETURN_IF_ERROR(durable_.Submit(update));
  ++(transient ? counters_.transient_retries : counters_.put_back);
  Kick();
  return Status::Ok();
}

Status ClosureDispatcher::Fail(uint64_t closure_id, uint64_t worker_id, uint32_t attempt,
                               const std::string& error, bool user_error) {
  const uint64_t coordinator_id = state().FindClosure(closure_id)->coordinator_id;
  capnp::MallocMessageBuilder message;
  auto update = message.initRoot<journal::Update>();
  update.setTimeMicros(durable_.NowMicros());
  auto failed = update.initClosureFailed();
  failed.setClosureId(closure_id);
  failed.setWorkerId(worker_id);
  failed.setAttempt(attempt);
  failed.setError(error);
  failed.setUserError(user_error);
  DISPATCH_RETURN_IF_ERROR(durable_.Submit(update));
  NotifyDone(coordinator_id, closure_id);
  // The first error cancels what the coordinator still has queued, as the
  // reference does; closures already running finish normally.
  DISPATCH_RETURN_IF_ERROR(CancelQueued(coordinator_id));
  NotifyError(coordinator_id);
  return Status::Ok();
}

Status ClosureDispatcher::CancelQueued(uint64_t coordinator_id) {
  std::vector<uint64_t> queued;
  for (const state::Closure* closure : state().ClosuresForCoordinator(coordinator_id)) {
    if (closure->state == state::ClosureState::QUEUED) queued.push_back(closure->id);
  }
  if (queued.empty()) return Status::Ok();
  // As many records as the journal's per-record limit needs.
  for (auto [begin, end] : SplitByCount(queued.size(), IdsPerRecord(MaxRecordBytes()))) {
    capnp::MallocMessageBuilder message;
    auto update = message.initRoot<journal::Update>();
    update.setTimeMicros(durable_.NowMicros());
    auto list = update.initClosureBatch().initCancelled(static_cast<unsigned>(end - begin));
    for (size_t i = begin; i < end; ++i) list.set(static_cast<unsigned>(i - begin), queued[i]);
    DISPATCH_RETURN_IF_ERROR(durable_.Submit(update));
    for (size_t i = begin; i < end; ++i) NotifyDone(coordinator_id, queued[i]);
  }
  WakeRoomWaiters();
  return Status::Ok();
}

Result<uint32_t> ClosureDispatcher::Report(uint64_t worker_id,
                                           capnp::List<rpc::ClosureReport>::Reader reports) {
  uint32_t ignored = 0;
  std::set<uint64_t> seen;
  std::vector<rpc::ClosureReport::Reader> results;
  std::vector<capnp::Data::Reader> result_bytes;  // results[i]'s bytes
  for (rpc::ClosureReport::Reader report : reports) {
    const state::Closure* closure = state().FindClosure(report.getClosureId());
    if (closure == nullptr || closure->state != state::ClosureState::ASSIGNED ||
        closure->worker_id != worker_id || closure->attempts != report.getAttempt() ||
        !seen.insert(closure->id).second) {
      ++ignored;  // late, repeated, or from a worker incarnation that lost it
      continue;
    }
    switch (report.which()) {
      case rpc::ClosureReport::RESULT: {
        // Read once: every read of a Data field counts against the
        // message's traversal limit, and a result may be half of it.
        capnp::Data::Reader bytes = report.getResult();
        const size_t size = bytes.size();
        if (size > options_.max_result_bytes) {
          // Refused here too (a worker that ignores the limit it was told),
          // never journaled: the closure fails with the limit in its error.
          ++counters_.results_over_limit;
          DISPATCH_RETURN_IF_ERROR(Fail(closure->id, worker_id, closure->attempts,
                                        ResultOverLimitError(closure->id, size,
                                                             options_.max_result_bytes),
                                        true));
          break;
        }
        results.push_back(report);
        result_bytes.push_back(bytes);
        break;
      }
      case rpc::ClosureReport::USER_ERROR: {
        std::string message = BoundedErrorText(View(report.getUserError()));
        if (message.empty()) message = "the function failed without a message";
        DISPATCH_RETURN_IF_ERROR(Fail(closure->id, worker_id, closure->attempts, message, true));
        break;
      }
      case rpc::ClosureReport::TRANSIENT_ERROR:
        DISPATCH_RETURN_IF_ERROR(
            Retry(*closure, true, BoundedErrorText(View(report.getTransientError()))));
        break;
      case rpc::ClosureReport::UNAVAILABLE: {
        auto slots = slots_.find(worker_id);
        if (slots != slots_.end()) slots->second.paused = true;
        DISPATCH_RETURN_IF_ERROR(Retry(*closure, false,
                                       "its worker is unavailable: " +
                                           BoundedErrorText(View(report.getUnavailable()))));
        break;
      }
    }
  }
  if (!results.empty()) {
    FlushReleases();  // they share this pass's commit
    // The records carry only ids, sizes and checksums; the bytes go to the
    // result table in the same transaction. Split so that no record grows
    // with the length of a report list.
    for (auto [begin, end] : SplitByCount(results.size(), kMaxFinishedPerRecord)) {
      capnp::MallocMessageBuilder message;
      auto update = message.initRoot<journal::Update>();
      update.setTimeMicros(durable_.NowMicros());
      auto list = update.initClosureBatch().initFinished(static_cast<unsigned>(end - begin));
      for (size_t i = begin; i < end; ++i) {
        capnp::Data::Reader bytes = result_bytes[i];
        auto item = list[static_cast<unsigned>(i - begin)];
        item.setClosureId(results[i].getClosureId());
        item.setWorkerId(worker_id);
        item.setAttempt(results[i].getAttempt());
        item.setResultStored(true);
        item.setResultSize(bytes.size());
        item.setResultCrc(Crc32c(bytes.begin(), bytes.size()));
      }
      DISPATCH_RETURN_IF_ERROR(durable_.Submit(update));
      for (size_t i = begin; i < end; ++i) {
        capnp::Data::Reader bytes = result_bytes[i];
        if (bytes.size() == 0) continue;  // an empty result needs no row
        durable_.PutResult(results[i].getClosureId(),
                           std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
      }
      counters_.results_accepted += end - begin;
      for (size_t i = begin; i < end; ++i) {
        NotifyDone(state().FindClosure(results[i].getClosureId())->coordinator_id,
                   results[i].getClosureId());
      }
    }
  }
  counters_.reports_ignored += ignored;
  if (!awaiting_reports_.empty()) {
    for (rpc::ClosureReport::Reader report : reports) awaiting_reports_.erase(report.getClosureId());
    if (awaiting_reports_.empty()) durable_.ReleaseHold();  // everything expected is in
  }
  Kick();  // their slots are free
  return ignored;
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

void ClosureDispatcher::AssignQueued() {
  if (state().NumClosuresInState(state::ClosureState::QUEUED) == 0 || slots_.empty()) return;
  const uint64_t now = uv_now(loop_);
  // Free slots per eligible worker, visited round robin from a moving start.
  std::vector<std::pair<uint64_t, uint64_t>> free;  // worker id, free slots
  uint64_t total_free = 0;
  for (const auto& [worker_id, entry] : slots_) {
    if (entry.paused || entry.slots == 0 || now < entry.eligible_at_ms) continue;
    if (!workers_.IsConnected(entry.address)) continue;
    const size_t running = state().NumClosuresOnWorker(worker_id);
    if (running >= entry.slots) continue;
    free.emplace_back(worker_id, entry.slots - running);
    total_free += entry.slots - running;
  }
  if (free.empty()) return;
  std::rotate(free.begin(), free.begin() + static_cast<long>(next_worker_turn_++ % free.size()),
              free.end());
  std::vector<const state::Closure*> queued = state().FirstQueuedClosures(total_free);
  std::map<uint64_t, std::vector<uint64_t>> per_worker;
  std::vector<std::pair<uint64_t, const state::Closure*>> assignments;
  size_t next = 0;
  // One closure per worker per round, so a short queue spreads over workers.
  while (next < queued.size()) {
    bool any = false;
    for (auto& [worker_id, slots] : free) {
      if (slots == 0 || next >= queued.size()) continue;
      --slots;
      any = true;
      assignments.emplace_back(worker_id, queued[next]);
      per_worker[worker_id].push_back(queued[next]->id);
      ++next;
    }
    if (!any) break;
  }
  // One record per journal-record's worth of assignments (a few hundred
  // thousand each). Should one be refused, those before it are assigned and
  // pushed; the rest stay queued (Push skips closures not assigned there).
  size_t submitted = 0;
  for (auto [begin, end] :
       SplitByCount(assignments.size(), AssignmentsPerRecord(MaxRecordBytes()))) {
    capnp::MallocMessageBuilder message;
    auto update = message.initRoot<journal::Update>();
    update.setTimeMicros(durable_.NowMicros());
    auto list = update.initClosureBatch().initAssigned(static_cast<unsigned>(end - begin));
    for (size_t i = begin; i < end; ++i) {
      auto item = list[static_cast<unsigned>(i - begin)];
      item.setClosureId(assignments[i].second->id);
      item.setWorkerId(assignments[i].first);
      item.setAttempt(assignments[i].second->attempts + 1);
    }
    Status status = durable_.Submit(update);
    if (!status.ok()) {
      Log(LogLevel::kWarning, "could not assign closures: ", status.ToString().c_str());
      break;
    }
    submitted = end;
  }
  if (submitted == 0) return;
  WakeRoomWaiters();
  if (options_.commit_hold_us > 0) {
    // Push now and hold the commit for the reports (see ClosureOptions).
    if (!durable_.holding()) awaiting_reports_.clear();
    durable_.HoldCommit(options_.commit_hold_us);
    for (auto& [worker_id, ids] : per_worker) {
      awaiting_reports_.insert(ids.begin(), ids.end());
      AddTask(Push(worker_id, kj::mv(ids)));
    }
    return;
  }
  for (auto& [worker_id, ids] : per_worker) {
    // The worker hears of its closures only once their assignment is durable.
    AddTask(durable_.Barrier().then(
        [this, worker_id, ids = kj::mv(ids)]() mutable { return Push(worker_id, kj::mv(ids)); }));
  }
}

namespace {

void FillResourceSpec(rpc::ResourceSpec::Builder spec, const state::PerWorkerResource& resource) {
  spec.setResourceId(resource.id);
  spec.setFunction(resource.function_name);
  spec.setArgs(state::AsData(resource.args));
}

}  // namespace

kj::Promise<void> ClosureDispatcher::Push(uint64_t worker_id, std::vector<uint64_t> closure_ids) {
  std::vector<std::pair<uint64_t, uint32_t>> refs;
  std::vector<const state::Closure*> closures;
  for (uint64_t id : closure_ids) {
    const state::Closure* closure = state().FindClosure(id);
    if (closure == nullptr || closure->state != state::ClosureState::ASSIGNED ||
        closure->worker_id != worker_id) {
      continue;  // lost its worker or was cancelled meanwhile
    }
    closures.push_back(closure);
    refs.emplace_back(id, closure->attempts);
  }
  if (closures.empty()) return kj::READY_NOW;
  auto slots = slots_.find(worker_id);
  rpc::WorkerControl::Client* control =
      slots == slots_.end() ? nullptr : workers_.ControlOf(slots->second.address);
  if (control == nullptr) {
    PushFailed(worker_id, refs);
    return kj::READY_NOW;
  }
  // One runClosures per kMaxPushBytes of closures (at least one closure
  // each), so that a worker with many slots and large closures is never sent
  // a message past its limit.
  auto runs = SplitIntoRecords(closures.size(), 0, kMaxPushBytes, [&](size_t i) {
    return ScheduledItemWords(closures[i]->function_name, closures[i]->args.size(),
                              closures[i]->resources.size());
  });
  auto sends = kj::heapArrayBuilder<kj::Promise<void>>(runs.size());
  for (auto [begin, end] : runs) {
    auto request = control->runClosuresRequest();
    auto list = request.initClosures(static_cast<unsigned>(end - begin));
    std::set<uint64_t> resource_ids;
    for (size_t i = begin; i < end; ++i) {
      const state::Closure& closure = *closures[i];
      auto item = list[static_cast<unsigned>(i - begin)];
      item.setClosureId(closure.id);
      item.setAttempt(closure.attempts);
      item.setFunction(closure.function_name);
      item.setArgs(state::AsData(closure.args));
      auto resources = item.initResources(static_cast<unsigned>(closure.resources.size()));
      for (unsigned r = 0; r < closure.resources.size(); ++r) resources.set(r, closure.resources[r]);
      for (uint64_t id : closure.resources) {
        // Those this connection has had already (SendResources) stay out:
        // a closure of many large resources still makes a small push.
        if (!slots->second.resources_sent.contains(id)) resource_ids.insert(id);
      }
    }
    auto specs = request.initResources(static_cast<unsigned>(resource_ids.size()));
    unsigned r = 0;
    for (uint64_t id : resource_ids) {
      FillResourceSpec(specs[r++], *state().FindResource(id));
    }
    std::vector<std::pair<uint64_t, uint32_t>> run_refs(refs.begin() + begin, refs.begin() + end);
    sends.add(request.send().then([](auto&&) {},
                                  [this, worker_id, run_refs = kj::mv(run_refs)](kj::Exception&& e) {
                                    Log(LogLevel::kDebug, "runClosures to worker ", worker_id,
                                        " failed: ", e.getDescription());
                                    PushFailed(worker_id, run_refs);
                                  }));
  }
  return kj::joinPromises(sends.finish());
}

void ClosureDispatcher::SendResources(uint64_t worker_id) {
  // Only committed resources: an id a crash could hand out again for another
  // resource must never reach a worker's cache.
  AddTask(durable_.Barrier().then([this, worker_id]() -> kj::Promise<void> {
    auto entry = slots_.find(worker_id);
    if (entry == slots_.end() || entry->second.slots == 0) return kj::READY_NOW;
    rpc::WorkerControl::Client* control = workers_.ControlOf(entry->second.address);
    if (control == nullptr) return kj::READY_NOW;
    std::vector<const state::PerWorkerResource*> missing;
    for (const auto& [id, resource] : state().resources()) {
      if (!entry->second.resources_sent.contains(id)) missing.push_back(&resource);
    }
    if (missing.empty()) return kj::READY_NOW;
    // Cut by bytes like closure pushes: many large resources never make one
    // message past the worker's limit.
    auto runs = SplitIntoRecords(missing.size(), 0, kMaxPushBytes, [&](size_t i) {
      return ScheduledItemWords(missing[i]->function_name, missing[i]->args.size(), 0);
    });
    auto sends = kj::heapArrayBuilder<kj::Promise<void>>(runs.size());
    for (auto [begin, end] : runs) {
      auto request = control->runClosuresRequest();
      request.initClosures(0);
      auto specs = request.initResources(static_cast<unsigned>(end - begin));
      std::vector<uint64_t> ids;
      for (size_t i = begin; i < end; ++i) {
        FillResourceSpec(specs[static_cast<unsigned>(i - begin)], *missing[i]);
        entry->second.resources_sent.insert(missing[i]->id);
        ids.push_back(missing[i]->id);
      }
      sends.add(request.send().then([](auto&&) {}, [this, worker_id, ids](kj::Exception&& e) {
        // The connection is going: the next one sends them all again.
        Log(LogLevel::kDebug, "sending per-worker resources to worker ", worker_id,
            " failed: ", e.getDescription());
        auto entry = slots_.find(worker_id);
        if (entry == slots_.end()) return;
        for (uint64_t id : ids) entry->second.resources_sent.erase(id);
      }));
    }
    return kj::joinPromises(sends.finish());
  }));
}

void ClosureDispatcher::PushFailed(uint64_t worker_id,
                                   const std::vector<std::pair<uint64_t, uint32_t>>& refs) {
  ++counters_.pushes_failed;
  for (const auto& [id, attempt] : refs) {
    const state::Closure* closure = state().FindClosure(id);
    if (closure == nullptr || closure->state != state::ClosureState::ASSIGNED ||
        closure->worker_id != worker_id || closure->attempts != attempt) {
      continue;  // already put back (its worker was removed) or done
    }
    Status status = Retry(*closure, false, "the push to its worker failed");
    if (!status.ok()) Log(LogLevel::kWarning, "closure retry: ", status.ToString().c_str());
  }
}

// ---- Coordinators ----------------------------------------------------------

uint64_t ClosureDispatcher::QueuedOrReserved() const {
  return state().NumClosuresInState(state::ClosureState::QUEUED) + reserved_;
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

namespace {

// One ClosureSpec, each field read once: the RPC server's traversal limit is
// the message size limit, so a schedule near that size can be read only once.
struct SpecView {
  capnp::Text::Reader function;
  capnp::Data::Reader args;
  capnp::List<uint64_t>::Reader resources;
  uint64_t request_id = 0;
  uint64_t words = 0;  // as an item of ClosureBatch.scheduled
};

}  // namespace

Status ClosureDispatcher::Schedule(uint64_t coordinator_id,
                                   capnp::List<rpc::ClosureSpec>::Reader specs,
                                   std::vector<uint64_t>& ids) {
  ids.assign(specs.size(), 0);
  const size_t max_record = MaxRecordBytes();
  const uint64_t overhead = ClosureBatchOverheadWords();
  // Every check runs before anything is queued: a refused call queues
  // nothing. Retried requests keep their closure.
  std::set<uint64_t> request_ids;
  std::vector<SpecView> fresh;
  std::vector<unsigned> fresh_index;
  for (unsigned i = 0; i < specs.size(); ++i) {
    auto spec = specs[i];
    SpecView view{spec.getFunction(), spec.getArgs(), spec.getResources(), spec.getRequestId()};
    if (view.function.size() == 0)
      return InvalidArgumentError("closure " + std::to_string(i) + " of the batch has no function");
    if (view.request_id != 0) {
      if (!request_ids.insert(view.request_id).second) {
        return InvalidArgumentError("the batch repeats request id " +
                                    std::to_string(view.request_id));
      }
      const state::Closure* earlier =
          state().FindClosureByRequest(coordinator_id, view.request_id);
      if (earlier != nullptr) {
        ids[i] = earlier->id;
        continue;
      }
    }
    for (uint64_t resource : view.resources) {
      if (state().FindResource(resource) == nullptr)
        return NotFoundError("per-worker resource " + std::to_string(resource) + " is unknown");
    }
    view.words = ScheduledItemWords(View(view.function), view.args.size(), view.resources.size());
    const uint64_t bytes = (overhead + view.words) * 8;
    if (bytes > max_record) {
      ids.clear();
      return ResourceExhaustedError(
          "closure " + std::to_string(i) + " of the batch (function " +
          std::string(View(view.function).substr(0, 64)) + ", " +
          std::to_string(view.args.size()) + " bytes of args) takes " + std::to_string(bytes) +
          " bytes in the journal, over the limit of " + std::to_string(max_record) +
          " bytes per record; nothing of the batch was scheduled");
    }
    fresh.push_back(view);
    fresh_index.push_back(i);
  }
  if (fresh.empty()) return Status::Ok();
  FlushReleases();  // they share this pass's commit
  // As many ClosureBatch records as the per-record limit needs, in order.
  uint64_t next_id = state().NextClosureId();
  for (auto [begin, end] : SplitIntoRecords(fresh.size(), overhead, max_record,
                                            [&](size_t k) { return fresh[k].words; })) {
    capnp::MallocMessageBuilder message;
    auto update = message.initRoot<journal::Update>();
    update.setTimeMicros(durable_.NowMicros());
    auto list = update.initClosureBatch().initScheduled(static_cast<unsigned>(end - begin));
    for (size_t k = begin; k < end; ++k) {
      const SpecView& view = fresh[k];
      auto item = list[static_cast<unsigned>(k - begin)];
      ids[fresh_index[k]] = next_id;
      item.setClosureId(next_id++);
      item.setCoordinatorId(coordinator_id);
      item.setFunctionName(view.function);
      item.setArgs(view.args);
      item.setRequestId(view.request_id);
      item.setResources(view.resources);
    }
    Status status = durable_.Submit(update);
    if (!status.ok()) {
      // Only a storage failure (or a bug) gets here after the checks above.
      // Records already submitted stay queued; a retry with the same request
      // ids finds them.
      ids.clear();
      if (begin > 0) Kick();
      return status;
    }
    counters_.scheduled += end - begin;
  }
  Kick();
  return Status::Ok();
}

Status ClosureDispatcher::Release(uint64_t coordinator_id,
                                  capnp::List<uint64_t>::Reader closure_ids) {
  std::vector<uint64_t> release;
  std::set<uint64_t> seen;
  for (uint64_t id : closure_ids) {
    const state::Closure* closure = state().FindClosure(id);
    if (closure == nullptr || !seen.insert(id).second || pending_releases_.contains(id))
      continue;  // released already
    if (closure->coordinator_id != coordinator_id)
      return NotFoundError(Name(id) + " is not a closure of coordinator " +
                           std::to_string(coordinator_id));
    if (!state::IsClosureDone(closure->state))
      return FailedPreconditionError(Name(id) + " is " + state::ClosureStateName(closure->state) +
                                     ": only a finished, failed or cancelled closure is released");
    release.push_back(id);
  }
  pending_releases_.insert(release.begin(), release.end());
  if (pending_releases_.size() >= kMaxPendingReleases) {
    FlushReleases();
  } else if (!pending_releases_.empty()) {
    if (release_timer_ == nullptr) {
      release_timer_ = std::make_unique<uvkj::UvRepeatingTimer>(loop_, kReleaseDelayMs,
                                                                [this]() { FlushReleases(); });
      release_timer_->Unref();
    }
    release_timer_->Start();
  }
  return Status::Ok();
}

void ClosureDispatcher::FlushReleases() {
  if (release_timer_ != nullptr) release_timer_->Stop();
  std::vector<uint64_t> release;
  std::set<uint64_t> stored;  // their rows go in the release's transaction
  for (uint64_t id : pending_releases_) {
    const state::Closure* closure = state().FindClosure(id);
    if (closure != nullptr && state::IsClosureDone(closure->state)) {
      release.push_back(id);
      if (closure->result_stored && closure->result_size > 0) stored.insert(id);
    }
  }
  pending_releases_.clear();
  if (release.empty()) return;
  for (auto [begin, end] : SplitByCount(release.size(), IdsPerRecord(MaxRecordBytes()))) {
    capnp::MallocMessageBuilder message;
    auto update = message.initRoot<journal::Update>();
    update.setTimeMicros(durable_.NowMicros());
    auto list = update.initClosureBatch().initReleased(static_cast<unsigned>(end - begin));
    for (size_t i = begin; i < end; ++i) list.set(static_cast<unsigned>(i - begin), release[i]);
    Status status = durable_.Submit(update);
    if (!status.ok()) {
      Log(LogLevel::kWarning, "could not release closures: ", status.ToString().c_str());
      return;
    }
    for (size_t i = begin; i < end; ++i) {
      if (stored.count(release[i]) != 0) durable_.DeleteResult(release[i]);
    }
    counters_.released += end - begin;
  }
}

Result<uint64_t> ClosureDispatcher::CreateResource(uint64_t coordinator_id,
                                                   std::string_view function,
                                                   std::string_view args, uint64_t request_id) {
  if (function.empty()) return InvalidArgumentError("a per-worker resource needs a function");
  if (request_id != 0) {
    const state::PerWorkerResource* earlier =
        state().FindResourceByRequest(coordinator_id, request_id);
    if (earlier != nullptr) {
      // A retry after a lost reply: the same resource, unless the key was
      // reused for something else.
      if (earlier->function_name != function || earlier->args != args) {
        return InvalidArgumentError("request id " + std::to_string(request_id) +
                                    " already created per-worker resource " +
                                    std::to_string(earlier->id) + " with function " +
                                    earlier->function_name);
      }
      return earlier->id;
    }
  }
  const uint64_t id = state().NextResourceId();
  capnp::MallocMessageBuilder message;
  auto update = message.initRoot<journal::Update>();
  update.setTimeMicros(durable_.NowMicros());
  auto created = update.initResourceCreated();
  created.setResourceId(id);
  created.setCoordinatorId(coordinator_id);
  created.setFunctionName(capnp::Text::Reader(function.data(), function.size()));
  created.setArgs(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(args.data()), args.size()));
  created.setRequestId(request_id);
  DISPATCH_RETURN_IF_ERROR(durable_.Submit(update));
  // Every worker builds its component now, not when a closure first needs it.
  for (const auto& [worker_id, entry] : slots_) {
    if (entry.slots > 0) SendResources(worker_id);
  }
  return id;
}

Status ClosureDispatcher::TakeFirstError(uint64_t coordinator_id,
                                         rpc::ClosureError::Builder error) {
  const state::CoordinatorError* pending = state().FindCoordinatorError(coordinator_id);
  if (pending == nullptr) return Status::Ok();
  error.setClosureId(pending->closure_id);
  error.setMessage(pending->error);
  capnp::MallocMessageBuilder message;
  auto update = message.initRoot<journal::Update>();
  update.setTimeMicros(durable_.NowMicros());
  update.initCoordinatorErrorCleared().setCoordinatorId(coordinator_id);
  return durable_.Submit(update);
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
