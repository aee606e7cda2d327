// AgentLink: a WorkerAgent's connection to the dispatcher, on the agent
// thread. It connects, registers by heartbeat with the worker's WorkerControl
// capability, heartbeats on an interval, hands assigned and deleted tasks to
// its Delegate, notices a dispatcher restart by the incarnation, and after any
// failure reconnects with jittered exponential backoff. Invariant: at most one
// connection at a time; WhenRegistered() waiters resolve only on a connection
// the dispatcher has answered a heartbeat on.
#pragma once

#include <kj/async-io.h>
#include <kj/timer.h>
#include <kj/vector.h>

#include <cstdint>
#include <vector>

#include "clients/agent_status.h"
#include "clients/backoff.h"
#include "clients/dispatcher_connection.h"
#include "clients/worker_agent_options.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

class AgentLink {
 public:
  // Where tasks go. Called on the agent thread.
  class Delegate {
   public:
    virtual ~Delegate() noexcept(false) = default;
    // Every task the worker holds (running or finished, until deleted).
    virtual std::vector<uint64_t> CurrentTaskIds() = 0;
    // Idempotent: a task already held is left alone.
    virtual void OnTasksAssigned(capnp::List<rpc::TaskInfo>::Reader tasks) = 0;
    virtual void OnTasksToDelete(capnp::List<uint64_t>::Reader task_ids) = 0;
  };

  AgentLink(kj::Timer& timer, kj::Network& network, const WorkerAgentOptions& options,
            uint64_t worker_incarnation, Delegate& delegate, rpc::WorkerControl::Client control,
            StatusBoard& board);
  AgentLink(const AgentLink&) = delete;
  AgentLink& operator=(const AgentLink&) = delete;

  // Connects, serves and reconnects forever; drop the promise to stop.
  kj::Promise<void> Run();
  // Sends a heartbeat now instead of at the next interval (if connected).
  void HeartbeatNow();
  // Resolves once the worker is registered on a live connection.
  kj::Promise<void> WhenRegistered();
  // The current connection's dispatcher; a client whose calls fail as
  // DISCONNECTED when there is no connection.
  rpc::Dispatcher::Client dispatcher();

  bool registered() const { return registered_; }
  uint64_t worker_id() const { return worker_id_; }
  // Counts connections: pushes that arrived on an earlier connection are
  // told apart from those of the current one (whose closures the dispatcher
  // still expects reports for).
  uint64_t session() const { return session_; }
  uint64_t dispatcher_incarnation() const { return incarnation_; }
  // The largest closure result the dispatcher accepts, from its last
  // heartbeat reply (0: not known).
  uint64_t max_result_bytes() const { return max_result_bytes_; }

  // True for failures a retry on the next connection can fix: a dropped
  // connection, a timeout, an Unavailable or overloaded dispatcher.
  static bool IsRetryable(const kj::Exception& exception);

 private:
  kj::Promise<void> RunSession();
  kj::Promise<void> HeartbeatLoop();
  kj::Promise<void> SendHeartbeat();
  kj::Promise<void> WaitForNextHeartbeat();
  void OnHeartbeatReply(rpc::WorkerHeartbeatResponse::Reader response);
  // `expected`: a failure a reconnect may cure (dropped or refused connection).
  void EndSession(kj::StringPtr why, bool expected);
  uint64_t HeartbeatTimeoutMs() const;

  kj::Timer& timer_;
  kj::Network& network_;
  const WorkerAgentOptions& options_;
  const uint64_t worker_incarnation_;
  Delegate& delegate_;
  rpc::WorkerControl::Client control_;
  StatusBoard& board_;
  Backoff backoff_;
  // The dispatchers to try (one, or an HA group); remembers the leader.
  const Result<DispatcherAddresses> addresses_;

  kj::Own<DispatcherConnection> connection_;
  bool registered_ = false;
  uint64_t worker_id_ = 0;
  uint64_t session_ = 0;
  uint64_t incarnation_ = 0;
  uint64_t max_result_bytes_ = 0;
  uint64_t interval_ms_;
  uint64_t failures_in_a_row_ = 0;
  bool heartbeat_requested_ = false;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> wake_heartbeat_;
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> registered_waiters_;
  // The last heartbeat's reply, held until the next heartbeat is sent: its
  // release is the Finish message Cap'n Proto owes the dispatcher, and sent
  // with the next call it costs the dispatcher no read and no wake-up of its
  // own (measured: about a fifth of the dispatcher's CPU per heartbeat).
  // Dropped with the connection; declared after it, so destroyed first.
  kj::Maybe<capnp::Response<rpc::Dispatcher::WorkerHeartbeatResults>> last_reply_;
};

// Calls `call(dispatcher)` once the agent is registered, and again (after a
// short growing delay, on the next registration) while it fails with a
// retryable error. `on_retry` runs before each repeat. `Call` must be
// copyable and return kj::Promise<T>.
template <typename T, typename Call>
kj::Promise<T> CallWithRetry(AgentLink& link, kj::Timer& timer, Call call,
                             std::function<void(const kj::Exception&)> on_retry = nullptr,
                             uint32_t attempt = 0) {
  return link.WhenRegistered()
      .then([&link, call]() mutable { return call(link.dispatcher()); })
      .then([](T&& value) -> kj::Promise<T> { return kj::mv(value); },
            [&link, &timer, call, on_retry, attempt](kj::Exception&& e) -> kj::Promise<T> {
              if (!AgentLink::IsRetryable(e)) return kj::mv(e);
              if (on_retry) on_retry(e);
              uint64_t delay_ms = std::min<uint64_t>(1000, uint64_t{10} << std::min(attempt, 7u));
              return timer.afterDelay(delay_ms * kj::MILLISECONDS)
                  .then([&link, &timer, call, on_retry, attempt]() {
                    return CallWithRetry<T>(link, timer, call, on_retry, attempt + 1);
                  });
            });
}

}  // namespace dispatch::clients
