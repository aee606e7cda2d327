#include "reactor/rpc_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

#include <capnp/rpc.h>
#include <kj/debug.h>

#include "common/log.h"

namespace dispatch::reactor {
namespace {

// The peer's IP address as text; empty for a peer with none (Unix socket).
std::string PeerAddressKey(kj::AsyncIoStream& stream) {
  struct sockaddr_storage storage = {};
  kj::uint length = sizeof(storage);
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                stream.getpeername(reinterpret_cast<sockaddr*>(&storage), &length);
              })) {
    return "";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (storage.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&storage)->sin_addr, text, sizeof(text));
  } else if (storage.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&storage)->sin6_addr, text, sizeof(text));
  }
  return text;
}

}  // namespace

struct RpcServer::Connection {
  Connection(ConnectionId id, std::string address, kj::Own<MessageGuardStream> s,
             capnp::ReaderOptions options, capnp::Capability::Client bootstrap)
      : id(id),
        address(std::move(address)),
        stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER, options),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}

  const ConnectionId id;
  const std::string address;  // peer IP; empty for Unix sockets
  // Destroyed bottom-up: the RPC system before the network that carries it,
  // the network before the stream it reads.
  kj::Own<MessageGuardStream> stream;
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
      budget_(limits.peer_memory_budget_bytes),
      error_handler_(kj::heap<ErrorHandler>()) {
  tasks_ = kj::heap<kj::TaskSet>(*error_handler_);
}

RpcServer::~RpcServer() noexcept(false) {
  accepting_ = nullptr;
  receiver_ = nullptr;
  connections_.clear();
  tasks_ = nullptr;
  if (outbound_charged_ > 0) budget_.Release(outbound_charged_);
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
  std::string address = PeerAddressKey(*stream);
  if (!address.empty()) {
    uint64_t& from_address = connections_per_address_[address];
    if (from_address >= limits_.max_connections_per_address) {
      ++counters_.refused_over_address_limit;
      Log(LogLevel::kWarning, "refusing a connection from ", address.c_str(), ": ", from_address,
          " open from that address, the limit is ", limits_.max_connections_per_address,
          " (--max-connections-per-address)");
      return;
    }
    ++from_address;
  }
  ++counters_.connections_accepted;
  ConnectionId id = next_id_++;

  capnp::ReaderOptions options;
  options.traversalLimitInWords = limits_.max_message_bytes / sizeof(capnp::word);
  options.nestingLimit = static_cast<int>(limits_.max_nesting_depth);
  auto guarded = kj::heap<MessageGuardStream>(kj::mv(stream), id, limits_.max_message_bytes, budget_,
                                              counters_.guard, io_.loop());
  auto conn = kj::heap<Connection>(id, std::move(address), kj::mv(guarded), options, bootstrap_(id));

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

void RpcServer::EnforceLimits() {
  for (auto& [id, conn] : connections_) {
    if (!conn->closing && conn->network.getCurrentQueueSize() > limits_.max_outbound_bytes_per_connection) {
      ++counters_.closed_outbound_bytes;
      Close(id, "outbound queue over its limit (peer not reading)");
    }
  }
  ChargeOutbound();
  EnforceMessageDeadlines();
}

void RpcServer::ChargeOutbound() {
  // Replies are built before we can refuse them, so they are charged as they
  // are (sampled once per tick): they make large inbound messages wait, and
  // past the whole budget the peers holding the most are closed.
  uint64_t total = 0;
  for (auto& [id, conn] : connections_) {
    if (!conn->closing) total += conn->network.getCurrentQueueSize();
  }
  while (total > budget_.limit()) {
    Connection* largest = nullptr;
    for (auto& [id, conn] : connections_) {
      if (!conn->closing && (largest == nullptr || conn->network.getCurrentQueueSize() >
                                                       largest->network.getCurrentQueueSize())) {
        largest = conn.get();
      }
    }
    if (largest == nullptr) break;
    total -= largest->network.getCurrentQueueSize();
    ++counters_.closed_outbound_over_budget;
    Close(largest->id, "queued replies of all peers over the peer memory budget; this one queued the most");
  }
  if (total > outbound_charged_) {
    budget_.ForceReserve(total - outbound_charged_);
  } else if (total < outbound_charged_) {
    budget_.Release(outbound_charged_ - total);
  }
  outbound_charged_ = total;
}

void RpcServer::EnforceMessageDeadlines() {
  uint64_t now_ms = uv_now(io_.loop());
  for (auto& [id, conn] : connections_) {
    if (conn->closing) continue;
    KJ_IF_MAYBE(started_ms, conn->stream->message_started_ms()) {
      if (now_ms - *started_ms > limits_.message_timeout_ms) {
        ++counters_.closed_message_timeout;
        Log(LogLevel::kWarning, "closing connection ", id, ": a message begun ", now_ms - *started_ms,
            " ms ago is unfinished, the limit is ", limits_.message_timeout_ms, " ms (--message-timeout-ms)");
        Close(id, "message deadline passed");
      }
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

void RpcServer::ForgetAll() {
  connections_.clear();
  connections_per_address_.clear();
}

void RpcServer::Forget(ConnectionId id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  kj::Own<Connection> conn = kj::mv(it->second);
  connections_.erase(it);
  if (!conn->address.empty()) {
    auto count = connections_per_address_.find(conn->address);
    if (count != connections_per_address_.end() && --count->second == 0) connections_per_address_.erase(count);
  }
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
