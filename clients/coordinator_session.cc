#include "clients/coordinator_session.h"

#include <kj/debug.h>

#include "common/closure_trace.h"
#include "common/log.h"
#include "common/rpc_status.h"

namespace dispatch::clients {

namespace {

rpc::Coordinator::Client Disconnected() {
  return capnp::Capability::Client(KJ_EXCEPTION(DISCONNECTED, "no open coordinator session"))
      .castAs<rpc::Coordinator>();
}

// Failures no reconnect cures: the caller must fix its token or address.
bool IsFatal(const kj::Exception& e) {
  StatusCode code = StatusFromException(e).code();
  return code == StatusCode::kUnauthenticated || code == StatusCode::kInvalidArgument;
}

}  // namespace

CoordinatorSession::CoordinatorSession(kj::Timer& timer, kj::Network& network,
                                       const CoordinatorOptions& options, uint64_t coordinator_id,
                                       ClosureBook& book)
    : timer_(timer),
      network_(network),
      options_(options),
      coordinator_id_(coordinator_id),
      book_(book),
      backoff_(options.backoff_initial_ms, options.backoff_max_ms, options.seed ^ coordinator_id),
      addresses_(DispatcherAddresses::Parse(options.dispatcher_address)),
      coordinator_(Disconnected()),
      tasks_(*this) {}

kj::Promise<void> CoordinatorSession::Run() {
  return RunSession()
      .then([]() -> kj::Promise<void> {
        return KJ_EXCEPTION(DISCONNECTED, "the coordinator session ended");
      })
      .catch_([this](kj::Exception&& e) { EndSession(e); })
      .then([this]() { return timer_.afterDelay(backoff_.NextDelayMs() * kj::MILLISECONDS); })
      .then([this]() { return Run(); });
}

kj::Promise<void> CoordinatorSession::RunSession() {
  if (!addresses_.ok()) return ExceptionFromStatus(addresses_.status());
  // Each address gets the connect timeout; the round as a whole a bound too.
  auto connect = DispatcherConnection::Connect(network_, *addresses_, options_.token, &timer_,
                                               options_.connect_timeout_ms);
  const uint64_t round_ms = uint64_t{options_.connect_timeout_ms} * (addresses_->list().size() + 2);
  return timer_.timeoutAfter(round_ms * kj::MILLISECONDS, kj::mv(connect))
      .then([this](kj::Own<DispatcherConnection> connection) {
        connection_ = kj::mv(connection);
        auto request = connection_->dispatcher().openCoordinatorRequest();
        request.setCoordinatorId(coordinator_id_);
        return request.send();
      })
      .then([this](capnp::Response<rpc::Dispatcher::OpenCoordinatorResults> response) {
        uint64_t incarnation = response.getIncarnation();
        if (incarnation_ != 0 && incarnation != incarnation_) {
          ++status_.dispatcher_restarts;
          Log(LogLevel::kInfo, "coordinator ", coordinator_id_,
              ": the dispatcher restarted (incarnation ", incarnation_, " -> ", incarnation, ")");
        }
        incarnation_ = incarnation;
        coordinator_ = response.getCoordinator();
        open_ = true;
        uint64_t generation = ++generation_;
        schedules_in_flight_ = 0;
        backoff_.Reset();
        book_.OnSessionStart();
        status_.open = true;
        status_.sessions_opened = generation;
        status_.dispatcher_incarnation = incarnation;
        if (listener_) listener_(status_);
        auto waiters = kj::mv(open_waiters_);
        open_waiters_ = kj::Vector<kj::Own<kj::PromiseFulfiller<void>>>();
        for (auto& waiter : waiters) waiter->fulfill();
        Flush();
        kj::Promise<void> dropped = connection_->OnDisconnect().then([]() -> kj::Promise<void> {
          return KJ_EXCEPTION(DISCONNECTED, "the dispatcher closed the connection");
        });
        return AwaitResults(generation).exclusiveJoin(kj::mv(dropped));
      });
}

void CoordinatorSession::EndSession(const kj::Exception& e) {
  bool was_open = open_;
  open_ = false;
  coordinator_ = Disconnected();
  connection_ = nullptr;  // calls still in flight reject as DISCONNECTED
  status_.open = false;
  status_.last_error = e.getDescription().cStr();
  if (listener_) listener_(status_);
  Log(was_open ? LogLevel::kWarning : LogLevel::kDebug, "coordinator ", coordinator_id_,
      was_open ? ": lost the dispatcher: " : ": cannot open a session: ", e.getDescription());
  if (IsFatal(e)) {
    auto waiters = kj::mv(open_waiters_);
    open_waiters_ = kj::Vector<kj::Own<kj::PromiseFulfiller<void>>>();
    for (auto& waiter : waiters) waiter->reject(kj::cp(e));
  }
}

kj::Promise<void> CoordinatorSession::WhenOpen() {
  if (open_) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  open_waiters_.add(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

kj::Promise<void> CoordinatorSession::ReleaseNow() {
  if (!open_ || connection_.get() == nullptr) return kj::READY_NOW;
  std::vector<uint64_t> releases = book_.TakeReleases();
  if (releases.empty()) return kj::READY_NOW;
  auto open = connection_->dispatcher().openCoordinatorRequest();
  open.setCoordinatorId(coordinator_id_);
  rpc::Coordinator::Client session = open.send().getCoordinator();  // pipelined
  auto release = session.awaitResultsRequest();
  auto list = release.initRelease(releases.size());
  for (size_t i = 0; i < releases.size(); ++i) list.set(i, releases[i]);
  release.setMaxResults(1);
  // Releasing happens before awaitResults waits; the join after it (same
  // target, so delivered in order) answers only once that is done. The
  // awaitResults itself is then dropped, cancelling its wait.
  auto released = release.send();
  auto join = session.joinRequest();
  join.setWait(false);
  return join.send().then(
      [this, releases, released = kj::mv(released)](auto&&) mutable {
        book_.OnReleased(releases);
      });
}

kj::Promise<void> CoordinatorSession::AwaitResults(uint64_t generation) {
  std::vector<uint64_t> releases = book_.TakeReleases();
  auto request = coordinator_.awaitResultsRequest();
  auto list = request.initRelease(releases.size());
  for (size_t i = 0; i < releases.size(); ++i) list.set(i, releases[i]);
  request.setMaxResults(options_.max_results_per_call);
  return request.send().then(
      [this, generation, releases](capnp::Response<rpc::Coordinator::AwaitResultsResults> r) {
        book_.OnReleased(releases);
        book_.OnOutcomes(r.getResults());
        return AwaitResults(generation);
      },
      [this, generation, releases](kj::Exception&& e) -> kj::Promise<void> {
        if (e.getType() == kj::Exception::Type::DISCONNECTED || releases.empty()) {
          return kj::mv(e);  // the session ends; the next one sends the releases again
        }
        // Refused for what it released (an id the dispatcher no longer
        // knows): those need no release; go on without them.
        Log(LogLevel::kWarning, "coordinator ", coordinator_id_, ": dropping ", releases.size(),
            " releases the dispatcher refused: ", e.getDescription());
        book_.OnReleased(releases);
        return AwaitResults(generation);
      });
}

void CoordinatorSession::Flush() {
  while (open_ && schedules_in_flight_ < options_.max_schedule_calls_in_flight) {
    std::vector<ClosureBook::Outgoing> batch =
        book_.TakeUnsent(options_.max_schedule_batch, options_.max_schedule_bytes);
    if (batch.empty()) return;
    auto request = coordinator_.scheduleRequest();
    auto closures = request.initClosures(batch.size());
    std::vector<uint64_t> sequences;
    sequences.reserve(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      const ClosureBook::Outgoing& c = batch[i];
      auto spec = closures[i];
      spec.setFunction(c.function);
      spec.setArgs(kj::arrayPtr(reinterpret_cast<const kj::byte*>(c.args.data()), c.args.size()));
      spec.setRequestId(c.request_id);
      if (!c.resources.empty()) {  // absent reads as empty, and costs the reader less
        auto resources = spec.initResources(c.resources.size());
        for (size_t j = 0; j < c.resources.size(); ++j) resources.set(j, c.resources[j]);
      }
      spec.setPriority(c.priority);
      spec.setTimeoutMs(c.timeout_ms);
      if (!c.inputs.empty()) {
        auto inputs = spec.initInputs(c.inputs.size());
        for (size_t j = 0; j < c.inputs.size(); ++j) inputs.set(j, c.inputs[j]);
      }
      if (c.trace_scheduled_ns != 0) {
        auto trace = spec.initTrace(kTraceClientStamps);
        trace.set(kTraceScheduled, c.trace_scheduled_ns);
        trace.set(kTraceScheduleSent, TraceNowNanos());
      }
      sequences.push_back(c.sequence);
    }
    ++schedules_in_flight_;
    uint64_t generation = generation_;
    tasks_.add(request.send()
                   .then(
                       [this, sequences](capnp::Response<rpc::Coordinator::ScheduleResults> r) {
                         auto error = r.getError();
                         if (error.getClosureId() != 0) {
                           Status first =
                               ClosureFailedError(error.getClosureId(), error.getMessage().cStr());
                           book_.OnRefused(
                               sequences,
                               CancelledError("not scheduled: the coordinator's first error "
                                              "came first (" +
                                              first.message() + ")"),
                               first);
                         } else {
                           book_.OnAcknowledged(sequences, r.getClosureIds());
                         }
                       },
                       [this, sequences](kj::Exception&& e) {
                         // A dropped connection: the next session sends them again.
                         if (e.getType() == kj::Exception::Type::DISCONNECTED) return;
                         Status status = StatusFromException(e);
                         Log(LogLevel::kWarning, "coordinator ", coordinator_id_,
                             ": the dispatcher refused ", sequences.size(),
                             " closures: ", status.ToString().c_str());
                         book_.OnRefused(sequences, status, Status::Ok());
                       })
                   .then([this, generation]() {
                     if (generation != generation_) return;  // that session's accounting is gone
                     --schedules_in_flight_;
                     Flush();
                   }));
  }
}

void CoordinatorSession::taskFailed(kj::Exception&& exception) {
  Log(LogLevel::kWarning, "coordinator ", coordinator_id_, ": ", exception.getDescription());
}

}  // namespace dispatch::clients
