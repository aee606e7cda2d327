// RpcServer: accepts connections and runs one Cap'n Proto RPC system per
// connection on the loop, with a limit on everything a peer can make us
// hold: connections, message size and nesting, calls in flight, outbound
// bytes queued, and time to authenticate. Crossing a limit closes that one
// connection and counts it; everyone else is unaffected. A dropped peer is
// noticed at once (the read side sees EOF or a reset) and forgotten.
// REQUIRES: every method is called on the loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>

#include <capnp/capability.h>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include "reactor/uvkj/async_io.h"

namespace dispatch::reactor {

struct ServerLimits {
  uint64_t max_connections = 4096;
  uint64_t max_message_bytes = 64ull << 20;
  uint64_t max_nesting_depth = 64;
  uint64_t max_calls_in_flight_per_connection = 4096;
  uint64_t max_outbound_bytes_per_connection = 256ull << 20;
  uint64_t handshake_timeout_ms = 10000;
};

struct ServerCounters {
  uint64_t connections_accepted = 0;
  uint64_t refused_over_connection_limit = 0;
  uint64_t closed_handshake_timeout = 0;
  uint64_t closed_outbound_bytes = 0;
  uint64_t closed_calls_in_flight = 0;
  uint64_t authentication_failures = 0;
  uint64_t calls_total = 0;
  uint64_t calls_in_flight = 0;
};

class RpcServer {
 public:
  using ConnectionId = uint64_t;
  // Builds the bootstrap capability (the gateway) of a new connection.
  using BootstrapFactory = std::function<capnp::Capability::Client(ConnectionId)>;
  // Told when a connection is gone, whatever the reason.
  using DisconnectListener = std::function<void(ConnectionId)>;

  RpcServer(uvkj::UvAsyncIo& io, ServerLimits limits, BootstrapFactory bootstrap);
  ~RpcServer() noexcept(false);
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  void Listen(kj::Own<kj::ConnectionReceiver> receiver);
  void StopAccepting();
  void AddDisconnectListener(DisconnectListener listener);

  // A connection passed the gateway: its handshake timer stops.
  void MarkAuthenticated(ConnectionId id);
  void CountAuthenticationFailure() { ++counters_.authentication_failures; }
  bool IsOpen(ConnectionId id) const { return connections_.count(id) != 0; }

  // Brackets every call a service handles on connection `id`. Returns false
  // (and closes the connection) when the call would cross the in-flight limit.
  bool CallStarted(ConnectionId id);
  void CallFinished(ConnectionId id);

  // Closes connections whose queued outbound bytes crossed the limit. Called
  // from the housekeeping timer and after every accepted call.
  void EnforceOutboundLimit();

  // Closes a connection after the current event (never under its own stack).
  void Close(ConnectionId id, const char* reason);
  void CloseAll();

  // True when no call is in flight and no connection has replies queued:
  // everything the server owed has been handed to the kernel.
  bool Quiescent();

  size_t connection_count() const { return connections_.size(); }
  const ServerCounters& counters() const { return counters_; }

 private:
  struct Connection;

  kj::Promise<void> AcceptLoop();
  void Accept(kj::Own<kj::AsyncIoStream> stream);
  void Forget(ConnectionId id);

  uvkj::UvAsyncIo& io_;
  const ServerLimits limits_;
  BootstrapFactory bootstrap_;
  std::vector<DisconnectListener> disconnect_listeners_;
  ServerCounters counters_;
  ConnectionId next_id_ = 1;
  std::map<ConnectionId, kj::Own<Connection>> connections_;
  kj::Own<kj::ConnectionReceiver> receiver_;
  kj::Promise<void> accepting_ = nullptr;
  kj::Own<kj::TaskSet> tasks_;
  class ErrorHandler;
  kj::Own<ErrorHandler> error_handler_;
};

}  // namespace dispatch::reactor
