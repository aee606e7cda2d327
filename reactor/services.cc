#include "reactor/services.h"

#include <kj/debug.h>

#include "common/rpc_status.h"
#include "reactor/dispatcher_server.h"
#include "reactor/service_util.h"

namespace dispatch::reactor {

capnp::Capability::Server::DispatchCallResult DispatcherService::dispatchCall(
    uint64_t interface_id, uint16_t method_id,
    capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) {
  server_.loop_thread().Check();
  RpcServer& rpc = server_.rpc();
  if (!rpc.CallStarted(connection_)) {
    rpc.CallFinished(connection_);
    kj::Promise<void> refused = ExceptionFromStatus(
        ResourceExhaustedError("too many calls in flight on this connection (--max-calls-in-flight)"));
    return {server_.rpc_metrics().Track(interface_id, method_id, kj::mv(refused)), false};
  }
  RpcServer::ConnectionId id = connection_;
  auto finished = kj::defer([&rpc, id]() { rpc.CallFinished(id); });
  DispatchCallResult result = DispatchWithPeerErrors([&]() {
    return rpc::Dispatcher::Server::dispatchCall(interface_id, method_id, context);
  });
  result.promise =
      server_.rpc_metrics().Track(interface_id, method_id, result.promise.attach(kj::mv(finished)));
  return result;
}

DataService& DispatcherService::data() {
  DataService* data = server_.data();
  if (data == nullptr || server_.shutting_down()) ThrowStatus(UnavailableError("the dispatcher is shutting down"));
  return *data;
}

kj::Promise<void> DispatcherService::getVersion(GetVersionContext context) {
  server_.FillVersion(context.getResults().initVersion());
  return kj::READY_NOW;
}

kj::Promise<void> DispatcherService::ping(PingContext context) {
  context.getResults().setPayload(context.getParams().getPayload());
  return kj::READY_NOW;
}

kj::Promise<void> DispatcherService::getServerStats(GetServerStatsContext context) {
  server_.FillStats(context.getResults().initStats());
  return kj::READY_NOW;
}

}  // namespace dispatch::reactor
