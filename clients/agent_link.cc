#include "clients/agent_link.h"

#include <kj/debug.h>

#include <algorithm>

#include "common/log.h"
#include "common/rpc_status.h"

namespace dispatch::clients {

AgentLink::AgentLink(kj::Timer& timer, kj::Network& network, const WorkerAgentOptions& options,
                     uint64_t worker_incarnation, Delegate& delegate,
                     rpc::WorkerControl::Client control, StatusBoard& board)
    : timer_(timer),
      network_(network),
      options_(options),
      worker_incarnation_(worker_incarnation),
      delegate_(delegate),
      control_(kj::mv(control)),
      board_(board),
      backoff_(options.backoff_initial_ms, options.backoff_max_ms,
               options.seed ^ worker_incarnation),
      addresses_(DispatcherAddresses::Parse(options.dispatcher_address)),
      interval_ms_(options.heartbeat_interval_ms) {}

bool AgentLink::IsRetryable(const kj::Exception& exception) {
  switch (exception.getType()) {
    case kj::Exception::Type::DISCONNECTED:
    case kj::Exception::Type::OVERLOADED:
      return true;
    default:
      break;
  }
  StatusCode code = StatusFromException(exception).code();
  return code == StatusCode::kUnavailable || code == StatusCode::kResourceExhausted;
}

kj::Promise<void> AgentLink::Run() {
  return RunSession()
      .then([this]() { EndSession("the session ended", true); },
            [this](kj::Exception&& e) {
              StatusCode code = StatusFromException(e).code();
              // A refused token or a bad address will not fix itself: say so loudly.
              bool expected = code != StatusCode::kUnauthenticated &&
                              code != StatusCode::kInvalidArgument &&
                              code != StatusCode::kFailedPrecondition;
              EndSession(e.getDescription(), expected);
            })
      .then([this]() {
        uint64_t delay_ms = backoff_.NextDelayMs();
        Log(LogLevel::kDebug, "worker ", options_.worker_address.c_str(), ": reconnecting in ",
            delay_ms, " ms");
        return timer_.afterDelay(delay_ms * kj::MILLISECONDS);
      })
      .then([this]() { return Run(); });
}

kj::Promise<void> AgentLink::RunSession() {
  heartbeat_requested_ = false;
  if (!addresses_.ok()) return ExceptionFromStatus(addresses_.status());
  // Each address gets the connect timeout; the round as a whole a bound too.
  auto connect = DispatcherConnection::Connect(network_, *addresses_, options_.token, &timer_,
                                               options_.connect_timeout_ms);
  const uint64_t round_ms = uint64_t{options_.connect_timeout_ms} * (addresses_->list().size() + 2);
  return timer_.timeoutAfter(round_ms * kj::MILLISECONDS, kj::mv(connect))
      .then([this](kj::Own<DispatcherConnection> connection) {
        connection_ = kj::mv(connection);
        ++session_;
        board_.Update([](WorkerAgentStatus& s) {
          s.connected = true;
          ++s.connects;
        });
        Log(LogLevel::kDebug, "worker ", options_.worker_address.c_str(), ": connected to ",
            connection_->address().c_str());
        kj::Promise<void> dropped = connection_->OnDisconnect().then([]() -> kj::Promise<void> {
          return KJ_EXCEPTION(DISCONNECTED, "the dispatcher closed the connection");
        });
        return HeartbeatLoop().exclusiveJoin(kj::mv(dropped));
      });
}

void AgentLink::EndSession(kj::StringPtr why, bool expected) {
  bool was_connected = connection_.get() != nullptr;
  bool was_registered = registered_;
  registered_ = false;
  wake_heartbeat_ = nullptr;
  last_reply_ = nullptr;  // before the connection it belongs to
  // Calls still in flight on this connection reject with DISCONNECTED; their
  // owners retry on the next registration.
  connection_ = nullptr;
  std::string reason(why.cStr());
  board_.Update([&](WorkerAgentStatus& s) {
    s.connected = false;
    s.registered = false;
    ++s.connect_failures;
    s.last_error = reason;
  });
  // Quiet while a known outage goes on: loud when a registered session ends,
  // for unexpected errors, and at 1, 10, 100... failed attempts in a row.
  ++failures_in_a_row_;
  if (was_registered) failures_in_a_row_ = 1;
  bool milestone =
      failures_in_a_row_ == 1 || failures_in_a_row_ == 10 || failures_in_a_row_ % 100 == 0;
  LogLevel level =
      (was_registered || !expected || milestone) ? LogLevel::kWarning : LogLevel::kDebug;
  Log(level, "worker ", options_.worker_address.c_str(), ": ",
      was_connected ? "lost the dispatcher: " : "cannot reach the dispatcher: ", why, " (",
      failures_in_a_row_, " failed attempt", failures_in_a_row_ == 1 ? "" : "s", " in a row)");
}

kj::Promise<void> AgentLink::HeartbeatLoop() {
  return SendHeartbeat().then([this]() { return WaitForNextHeartbeat(); }).then([this]() {
    return HeartbeatLoop();
  });
}

kj::Promise<void> AgentLink::WaitForNextHeartbeat() {
  if (heartbeat_requested_) {
    heartbeat_requested_ = false;
    return kj::READY_NOW;
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  wake_heartbeat_ = kj::mv(paf.fulfiller);
  return timer_.afterDelay(interval_ms_ * kj::MILLISECONDS)
      .exclusiveJoin(kj::mv(paf.promise))
      .then([this]() { wake_heartbeat_ = nullptr; });
}

void AgentLink::HeartbeatNow() {
  KJ_IF_MAYBE (wake, wake_heartbeat_) {
    (*wake)->fulfill();
  } else {
    heartbeat_requested_ = true;
  }
}

uint64_t AgentLink::HeartbeatTimeoutMs() const {
  if (options_.heartbeat_timeout_ms > 0) return options_.heartbeat_timeout_ms;
  return std::max<uint64_t>(10 * uint64_t{options_.heartbeat_interval_ms}, 10000);
}

kj::Promise<void> AgentLink::SendHeartbeat() {
  KJ_ASSERT(connection_.get() != nullptr, "heartbeat without a connection");
  auto request = connection_->dispatcher().workerHeartbeatRequest();
  auto heartbeat = request.initRequest();
  heartbeat.setAddress(options_.worker_address);
  heartbeat.setTransferAddress(options_.transfer_address.empty() ? options_.worker_address
                                                                 : options_.transfer_address);
  auto tags = heartbeat.initTags(options_.tags.size());
  for (size_t i = 0; i < options_.tags.size(); ++i) tags.set(i, options_.tags[i]);
  heartbeat.setWorkerIncarnation(worker_incarnation_);
  // Sent with every heartbeat, not only the first: a dispatcher that dropped
  // us (timeout, restart) re-registers us from any heartbeat.
  heartbeat.setControl(control_);
  std::vector<uint64_t> current = delegate_.CurrentTaskIds();
  auto list = heartbeat.initCurrentTasks(current.size());
  for (size_t i = 0; i < current.size(); ++i) list.set(i, current[i]);
  heartbeat.setMaxClosures(options_.max_closures);
  auto functions = heartbeat.initFunctions(options_.functions.size());
  for (size_t i = 0; i < options_.functions.size(); ++i) functions.set(i, options_.functions[i]);
  if (!options_.dataset_kinds.empty()) {
    auto kinds = heartbeat.initDatasetKinds(options_.dataset_kinds.size());
    for (size_t i = 0; i < options_.dataset_kinds.size(); ++i)
      kinds.set(i, options_.dataset_kinds[i]);
  }
  auto reply = request.send();
  last_reply_ = nullptr;  // its Finish goes out with this call
  return timer_.timeoutAfter(HeartbeatTimeoutMs() * kj::MILLISECONDS, kj::mv(reply))
      .then([this](capnp::Response<rpc::Dispatcher::WorkerHeartbeatResults> response) {
        OnHeartbeatReply(response.getResponse());
        last_reply_ = kj::mv(response);
      });
}

void AgentLink::OnHeartbeatReply(rpc::WorkerHeartbeatResponse::Reader response) {
  uint64_t incarnation = response.getIncarnation();
  bool restarted = incarnation_ != 0 && incarnation != incarnation_;
  bool first = !registered_;
  if (restarted) {
    Log(LogLevel::kInfo, "worker ", options_.worker_address.c_str(),
        ": the dispatcher restarted (incarnation ", incarnation_, " -> ", incarnation,
        "); registered again as worker ", response.getWorkerId());
  } else if (first) {
    Log(LogLevel::kDebug, "worker ", options_.worker_address.c_str(), ": registered as worker ",
        response.getWorkerId());
  }
  incarnation_ = incarnation;
  worker_id_ = response.getWorkerId();
  max_result_bytes_ = response.getMaxResultBytes();
  uint32_t wanted = response.getHeartbeatIntervalMillis();
  interval_ms_ = wanted > 0 ? std::min(options_.heartbeat_interval_ms, wanted)
                            : options_.heartbeat_interval_ms;
  registered_ = true;
  board_.Update([&](WorkerAgentStatus& s) {
    s.registered = true;
    s.worker_id = worker_id_;
    s.dispatcher_incarnation = incarnation;
    ++s.heartbeats;
    if (first) ++s.registrations;
    if (restarted) ++s.dispatcher_restarts;
  });
  delegate_.OnTasksToDelete(response.getTasksToDelete());
  delegate_.OnTasksAssigned(response.getNewTasks());
  if (first || restarted) {
    backoff_.Reset();
    failures_in_a_row_ = 0;
    auto waiters = kj::mv(registered_waiters_);
    registered_waiters_ = kj::Vector<kj::Own<kj::PromiseFulfiller<void>>>();
    for (auto& waiter : waiters) waiter->fulfill();
  }
}

rpc::Dispatcher::Client AgentLink::dispatcher() {
  if (connection_.get() == nullptr) {
    return capnp::Capability::Client(KJ_EXCEPTION(DISCONNECTED, "not connected to the dispatcher"))
        .castAs<rpc::Dispatcher>();
  }
  return connection_->dispatcher();
}

kj::Promise<void> AgentLink::WhenRegistered() {
  if (registered_ && connection_.get() != nullptr) return kj::READY_NOW;
  // Drop waiters whose callers gave up, so a long outage does not pile them up.
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> live;
  for (auto& waiter : registered_waiters_) {
    if (waiter->isWaiting()) live.add(kj::mv(waiter));
  }
  registered_waiters_ = kj::mv(live);
  auto paf = kj::newPromiseAndFulfiller<void>();
  registered_waiters_.add(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

}  // namespace dispatch::clients
