#include "clients/reconnecting_connection.h"

#include <kj/debug.h>

#include "common/log.h"
#include "common/rpc_status.h"

namespace dispatch::clients {

ReconnectingConnection::ReconnectingConnection(kj::Network& network, kj::Timer& timer,
                                               std::string address, std::string token,
                                               uint64_t seed, uint64_t backoff_initial_ms,
                                               uint64_t backoff_max_ms)
    : network_(network),
      timer_(timer),
      address_(std::move(address)),
      addresses_(DispatcherAddresses::Parse(address_)),
      token_(std::move(token)),
      backoff_(backoff_initial_ms, backoff_max_ms, seed) {}

kj::Promise<void> ReconnectingConnection::Ready() {
  if (connection_.get() != nullptr) return kj::READY_NOW;
  if (connecting_in_progress_) {
    KJ_IF_MAYBE (pending, connecting_) {
      return pending->addBranch();
    }
  }
  // A finished fork from an earlier connection is replaced here, never from
  // inside its own chain.
  connecting_in_progress_ = true;
  auto fork = Connect().fork();
  auto branch = fork.addBranch();
  connecting_ = kj::mv(fork);
  return branch;
}

kj::Promise<void> ReconnectingConnection::Connect() {
  if (!addresses_.ok()) return ExceptionFromStatus(addresses_.status());
  // An address that swallows packets must not hold up the rest of a list.
  constexpr uint64_t kAttemptTimeoutMs = 10000;
  return DispatcherConnection::Connect(network_, *addresses_, token_, &timer_, kAttemptTimeoutMs)
      .then(
          [this](kj::Own<DispatcherConnection> connection) -> kj::Promise<void> {
            connection_ = kj::mv(connection);
            uint64_t generation = ++generation_;
            backoff_.Reset();
            watch_ = connection_->OnDisconnect()
                         .then([this, generation]() { Drop(generation); },
                               [this, generation](kj::Exception&&) { Drop(generation); })
                         .eagerlyEvaluate(nullptr);
            connecting_in_progress_ = false;
            return kj::READY_NOW;
          },
          [this](kj::Exception&& e) -> kj::Promise<void> {
            uint64_t delay_ms = backoff_.NextDelayMs();
            Log(LogLevel::kDebug, "cannot reach the dispatcher at ", address_.c_str(), " (",
                e.getDescription(), "); again in ", delay_ms, " ms");
            return timer_.afterDelay(delay_ms * kj::MILLISECONDS).then([this]() {
              return Connect();
            });
          });
}

rpc::Dispatcher::Client ReconnectingConnection::dispatcher() {
  if (connection_.get() == nullptr) {
    return capnp::Capability::Client(KJ_EXCEPTION(DISCONNECTED, "not connected to the dispatcher"))
        .castAs<rpc::Dispatcher>();
  }
  return connection_->dispatcher();
}

void ReconnectingConnection::Drop(uint64_t generation) {
  if (generation != generation_ || connection_.get() == nullptr) return;
  Log(LogLevel::kDebug, "connection ", generation, " to ", address_.c_str(), " dropped");
  connection_ = nullptr;
}

}  // namespace dispatch::clients
