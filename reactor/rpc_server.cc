#include "reactor/rpc_server.h"

#include <capnp/rpc.h>
#include <kj/debug.h>

#include "common/log.h"

namespace dispatch::reactor {

struct RpcServer::Connection {
  Connection(ConnectionId id, kj::Own<kj::AsyncIoStream> s, capnp::ReaderOptions options,
             capnp::Capability::Client bootstrap)
      : id(id),
        stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER, options),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}

  const ConnectionId id;
  // Destroyed bottom-up: the RPC system before the network that carries it,
  // the network before the stream it reads.
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
  uint32_t calls_in_flight = 0;
  bool closing = false;
  kj::Promise<void> watch = nullptr;      // resolves when the peer goes away
  kj::Promise<void> handshake = nullptr;  // closes the connection unless it authenticates
};

class RpcServer::ErrorHandler final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&& exception) override {
    Log(LogLevel::kDebug, "server task failed: ", exception.getDescription());
  }
};

RpcServer::RpcServer(uvkj::UvAsyncIo& io, ServerLimits limits, BootstrapFactory bootstrap)
    : io_(io),
      limits_(limits),
      bootstrap_(std::move(bootstrap)),
      error_handler_(kj::heap<ErrorHandler>()) {
  tasks_ = kj::heap<kj::TaskSet>(*error_handler_);
}

RpcServer::~RpcServer() noexcept(false) {
  accepting_ = nullptr;
  receiver_ = nullptr;
  connections_.clear();
  tasks_ = nullptr;
}

void RpcServer::Listen(kj::Own<kj::ConnectionReceiver> receiver) {
  receiver_ = kj::mv(receiver);
  accepting_ = AcceptLoop().eagerlyEvaluate([](kj::Exception&& e) {
    Log(LogLevel::kError, "accept loop stopped: ", e.getDescription());
  });
}

void RpcServer::StopAccepting() {
  accepting_ = nullptr;
  receiver_ = nullptr;
}

void RpcServer::AddDisconnectListener(DisconnectListener listener) {
  disconnect_listeners_.push_back(std::move(listener));
}

kj::Promise<void> RpcServer::AcceptLoop() {
  return receiver_->accept().then([this](kj::Own<kj::AsyncIoStream> stream) {
    Accept(kj::mv(stream));
    return AcceptLoop();
  });
}

void RpcServer::Accept(kj::Own<kj::AsyncIoStream> stream) {
  if (connections_.size() >= limits_.max_connections) {
    // Dropping the stream closes the socket: the peer sees EOF at once.
    ++counters_.refused_over_connection_limit;
    Log(LogLevel::kWarning, "refusing a connection: ", connections_.size(),
        " open, the limit is ", limits_.max_connections);
    return;
  }
  ++counters_.connections_accepted;
  ConnectionId id = next_id_++;

  capnp::ReaderOptions options;
  options.traversalLimitInWords = limits_.max_message_bytes / sizeof(capnp::word);
  options.nestingLimit = static_cast<int>(limits_.max_nesting_depth);
  auto conn = kj::heap<Connection>(id, kj::mv(stream), options, bootstrap_(id));

  conn->watch = conn->network.onDisconnect()
                    .then([this, id]() { Close(id, "peer disconnected"); })
                    .eagerlyEvaluate(nullptr);
  conn->handshake = io_.timer()
                        .afterDelay(limits_.handshake_timeout_ms * kj::MILLISECONDS)
                        .then([this, id]() {
                          ++counters_.closed_handshake_timeout;
                          Close(id, "no authentication within the handshake timeout");
                        })
                        .eagerlyEvaluate(nullptr);
  connections_.emplace(id, kj::mv(conn));
  Log(LogLevel::kDebug, "connection ", id, " accepted");
}

void RpcServer::MarkAuthenticated(ConnectionId id) {
  auto it = connections_.find(id);
  if (it != connections_.end()) it->second->handshake = nullptr;
}

bool RpcServer::CallStarted(ConnectionId id) {
  ++counters_.calls_total;
  ++counters_.calls_in_flight;
  auto it = connections_.find(id);
  if (it == connections_.end()) return true;  // closing: the call dies with it
  Connection& conn = *it->second;
  if (conn.calls_in_flight >= limits_.max_calls_in_flight_per_connection) {
    ++counters_.closed_calls_in_flight;
    Close(id, "too many calls in flight");
    return false;
  }
  ++conn.calls_in_flight;
  return true;
}

void RpcServer::CallFinished(ConnectionId id) {
  if (counters_.calls_in_flight > 0) --counters_.calls_in_flight;
  auto it = connections_.find(id);
  if (it != connections_.end() && it->second->calls_in_flight > 0) --it->second->calls_in_flight;
}

void RpcServer::EnforceOutboundLimit() {
  for (auto& [id, conn] : connections_) {
    if (!conn->closing && conn->network.getCurrentQueueSize() > limits_.max_outbound_bytes_per_connection) {
      ++counters_.closed_outbound_bytes;
      Close(id, "outbound queue over its limit (peer not reading)");
    }
  }
}

void RpcServer::Close(ConnectionId id, const char* reason) {
  auto it = connections_.find(id);
  if (it == connections_.end() || it->second->closing) return;
  it->second->closing = true;
  Log(LogLevel::kDebug, "closing connection ", id, ": ", reason);
  // The caller may be running inside this connection's own promise chain;
  // destroy it from a fresh event instead.
  tasks_->add(kj::evalLater([this, id]() { Forget(id); }));
}

void RpcServer::CloseAll() {
  std::vector<ConnectionId> ids;
  for (auto& entry : connections_) ids.push_back(entry.first);
  for (ConnectionId id : ids) Close(id, "server shutting down");
}

void RpcServer::Forget(ConnectionId id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  kj::Own<Connection> conn = kj::mv(it->second);
  connections_.erase(it);
  conn = nullptr;  // closes the socket
  for (auto& listener : disconnect_listeners_) listener(id);
}

bool RpcServer::Quiescent() {
  if (counters_.calls_in_flight > 0) return false;
  for (auto& entry : connections_) {
    if (entry.second->network.getCurrentQueueCount() > 0) return false;
  }
  return true;
}

}  // namespace dispatch::reactor
