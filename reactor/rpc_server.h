// RpcServer: accepts connections and runs one Cap'n Proto RPC system per
// connection on the loop, with a limit on everything a peer can make us
// hold: connections (in all and per peer address), message size and
// nesting, the time a begun message may take, calls in flight, outbound
// bytes queued, and time to authenticate. Crossing a limit closes that one
// connection and counts it; everyone else is unaffected. One process-wide
// PeerMemoryBudget bounds the bytes held for all peers together: half-
// received messages wait for it (see MessageGuardStream) and queued replies
// are charged to it. A dropped peer is noticed at once and forgotten.
// REQUIRES: every method is called on the loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <capnp/capability.h>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include "reactor/message_guard_stream.h"
#include "reactor/peer_memory_budget.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::reactor {

struct ServerLimits {
  uint64_t max_connections = 4096;
  uint64_t max_message_bytes = 64ull << 20;
  uint64_t max_nesting_depth = 64;
  uint64_t max_calls_in_flight_per_connection = 4096;
  uint64_t max_outbound_bytes_per_connection = 256ull << 20;
  uint64_t handshake_timeout_ms = 10000;
  // A message whose first byte arrived must have its last byte within this
  // long (checked by the housekeeping tick, so up to one tick later).
  uint64_t message_timeout_ms = 60000;
  // Open TCP connections from one peer IP address; Unix-socket peers count
  // against max_connections only.
  uint64_t max_connections_per_address = 1024;
  // Bytes held for all peers together: half-received messages and queued
  // replies (and whatever else is charged to peer_memory()).
  uint64_t peer_memory_budget_bytes = 256ull << 20;
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
  uint64_t refused_over_address_limit = 0;
  uint64_t closed_message_timeout = 0;
  // Oversized messages, messages that can never fit the budget, and
  // messages whose body waited for the budget.
  MessageGuardCounters guard;
  // Connections closed because all queued replies together crossed the budget.
  uint64_t closed_outbound_over_budget = 0;
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
  // Serves a stream that did not come through the listener (an in-process
  // peer such as the gateway fuzz target's in-memory pipe) exactly like an
  // accepted connection: the same limits, guard, handshake timer and counters.
  void Serve(kj::Own<kj::AsyncIoStream> stream) { Accept(kj::mv(stream)); }
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

  // Called by the housekeeping timer: charges the queued replies of every
  // connection to the budget (closing the largest queues while they exceed
  // it), closes connections whose queue crossed the per-connection limit
  // and those whose begun message passed the message deadline.
  void EnforceLimits();

  // Closes a connection after the current event (never under its own stack).
  void Close(ConnectionId id, const char* reason);
  void CloseAll();
  // Destroys every connection now, without telling the disconnect
  // listeners: for an owner that goes while the RpcServer stays (the
  // capabilities they hold refer to it). REQUIRES: not under a connection's
  // own callbacks.
  void ForgetAll();

  // True when no call is in flight and no connection has replies queued:
  // everything the server owed has been handed to the kernel.
  bool Quiescent();

  size_t connection_count() const { return connections_.size(); }
  const ServerCounters& counters() const { return counters_; }
  // The process-wide budget for bytes held on behalf of peers. Others may
  // charge it (TryReserve/ForceReserve/Release, or the RAII Reservation).
  PeerMemoryBudget& peer_memory() { return budget_; }
  const PeerMemoryBudget& peer_memory() const { return budget_; }
  // Queued reply bytes charged to the budget at the last EnforceLimits().
  uint64_t outbound_charged() const { return outbound_charged_; }

 private:
  struct Connection;

  kj::Promise<void> AcceptLoop();
  void Accept(kj::Own<kj::AsyncIoStream> stream);
  void Forget(ConnectionId id);
  void ChargeOutbound();
  void EnforceMessageDeadlines();

  uvkj::UvAsyncIo& io_;
  const ServerLimits limits_;
  BootstrapFactory bootstrap_;
  std::vector<DisconnectListener> disconnect_listeners_;
  ServerCounters counters_;
  // Declared before connections_: outlives every stream that reserves from it.
  PeerMemoryBudget budget_;
  uint64_t outbound_charged_ = 0;
  std::map<std::string, uint64_t> connections_per_address_;
  ConnectionId next_id_ = 1;
  std::map<ConnectionId, kj::Own<Connection>> connections_;
  kj::Own<kj::ConnectionReceiver> receiver_;
  kj::Promise<void> accepting_ = nullptr;
  kj::Own<kj::TaskSet> tasks_;
  class ErrorHandler;
  kj::Own<ErrorHandler> error_handler_;
};

}  // namespace dispatch::reactor
