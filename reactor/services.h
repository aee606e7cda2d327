// The RPC objects of one connection: the Gateway (the bootstrap capability,
// the only thing reachable before authentication) and the Dispatcher it hands
// out. Both are thin: they check the loop thread, bracket every call for the
// in-flight limit, and turn each request into work on the DispatcherServer.
#pragma once

#include "reactor/rpc_server.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::reactor {

class DispatcherServer;

class GatewayService final : public rpc::Gateway::Server {
 public:
  GatewayService(DispatcherServer& server, RpcServer::ConnectionId connection)
      : server_(server), connection_(connection) {}

  kj::Promise<void> authenticate(AuthenticateContext context) override;

 private:
  // A peer that keeps guessing tokens is cut off.
  static constexpr int kMaxFailedAttempts = 3;

  DispatcherServer& server_;
  const RpcServer::ConnectionId connection_;
  int failed_attempts_ = 0;
};

class DispatcherService final : public rpc::Dispatcher::Server {
 public:
  DispatcherService(DispatcherServer& server, RpcServer::ConnectionId connection)
      : server_(server), connection_(connection) {}

  DispatchCallResult dispatchCall(uint64_t interface_id, uint16_t method_id,
                                  capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) override;

  kj::Promise<void> getVersion(GetVersionContext context) override;
  kj::Promise<void> ping(PingContext context) override;
  kj::Promise<void> getServerStats(GetServerStatsContext context) override;

 private:
  DispatcherServer& server_;
  const RpcServer::ConnectionId connection_;
};

}  // namespace dispatch::reactor
