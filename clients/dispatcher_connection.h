// DispatcherConnection: one authenticated Cap'n Proto connection to the
// dispatcher, the base every embeddable client (WorkerAgent, consumers, the
// Coordinator, dispatchctl) builds on. It runs on whatever KJ event loop the
// caller has (in this project: a libuv loop through reactor/uvkj).
#pragma once

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

class DispatcherConnection {
 public:
  // Connects to `address` ("tcp:HOST:PORT" or "unix:PATH") and presents
  // `token` at the gateway. Resolves once the gateway accepted; rejects with
  // an InvalidArgument status for a malformed address, the socket error for
  // an unreachable one, and Unauthenticated for a refused token.
  static kj::Promise<kj::Own<DispatcherConnection>> Connect(kj::Network& network,
                                                            kj::StringPtr address,
                                                            kj::StringPtr token = "");

  DispatcherConnection(kj::Own<kj::AsyncIoStream> stream);
  DispatcherConnection(const DispatcherConnection&) = delete;
  DispatcherConnection& operator=(const DispatcherConnection&) = delete;

  rpc::Dispatcher::Client& dispatcher() { return dispatcher_; }
  rpc::Gateway::Client& gateway() { return gateway_; }
  // Resolves when the connection drops, whoever dropped it.
  kj::Promise<void> OnDisconnect() { return client_.onDisconnect(); }

 private:
  kj::Promise<void> Authenticate(kj::StringPtr token);

  kj::Own<kj::AsyncIoStream> stream_;  // declared first: outlives the RPC objects
  capnp::TwoPartyClient client_;
  rpc::Gateway::Client gateway_;
  rpc::Dispatcher::Client dispatcher_;
};

}  // namespace dispatch::clients
