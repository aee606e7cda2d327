// DispatcherConnection: one authenticated Cap'n Proto connection to the
// dispatcher, the base every embeddable client (WorkerAgent, consumers, the
// Coordinator, dispatchctl) builds on. It runs on whatever KJ event loop the
// caller has (in this project: a libuv loop through reactor/uvkj).
// Connect takes an address list (clients/dispatcher_addresses.h) and finds
// the one that serves: in an HA group, the leader (docs/high_availability.md
// §8). This is the one place that walks a list and follows "not the leader".
#pragma once

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/timer.h>

#include <string>

#include "clients/dispatcher_addresses.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

class DispatcherConnection {
 public:
  // One round over `addresses`: tries them in DispatcherAddresses::RoundOrder
  // (the one that last worked first), each at most once, and presents `token`
  // at each gateway. A refusal "not the leader; the leader is ADDRESS" makes
  // ADDRESS the next attempt (once per round; ADDRESS need not be in the
  // list). Resolves with the first connection whose gateway accepted, and
  // remembers its address in `addresses`. When every attempt failed it
  // rejects: with that attempt's own error when there was one attempt (an
  // InvalidArgument status for a malformed address, the socket error for an
  // unreachable one, Unauthenticated for a refused token, Unavailable "not the
  // leader; ..." from a standby), otherwise with a status naming each address
  // and its failure: Unauthenticated when one of them refused the token, else
  // Unavailable. It never waits between attempts: the caller's back-off
  // repeats the round. With a timer, each attempt (connect + authenticate)
  // gets at most `attempt_timeout_ms` (0: no limit), so an address that
  // swallows packets cannot hold up the rest of the list.
  static kj::Promise<kj::Own<DispatcherConnection>> Connect(kj::Network& network,
                                                            const DispatcherAddresses& addresses,
                                                            kj::StringPtr token,
                                                            kj::Timer* timer = nullptr,
                                                            uint64_t attempt_timeout_ms = 0);
  // The same for a list written out ("tcp:H:P" or "tcp:H1:P1,unix:PATH");
  // InvalidArgument for a malformed list. Nothing is remembered across calls.
  static kj::Promise<kj::Own<DispatcherConnection>> Connect(kj::Network& network,
                                                            kj::StringPtr addresses,
                                                            kj::StringPtr token = "");
  // Exactly one address, no list, no following: what each attempt does.
  static kj::Promise<kj::Own<DispatcherConnection>> ConnectOne(kj::Network& network,
                                                               kj::StringPtr address,
                                                               kj::StringPtr token);

  DispatcherConnection(kj::Own<kj::AsyncIoStream> stream, std::string address = "");
  DispatcherConnection(const DispatcherConnection&) = delete;
  DispatcherConnection& operator=(const DispatcherConnection&) = delete;

  rpc::Dispatcher::Client& dispatcher() { return dispatcher_; }
  rpc::Gateway::Client& gateway() { return gateway_; }
  // The address this connection reached ("tcp:H:P" or "unix:PATH").
  const std::string& address() const { return address_; }
  // Resolves when the connection drops, whoever dropped it.
  kj::Promise<void> OnDisconnect() { return client_.onDisconnect(); }

 private:
  kj::Promise<void> Authenticate(kj::StringPtr token);

  kj::Own<kj::AsyncIoStream> stream_;  // declared first: outlives the RPC objects
  const std::string address_;
  capnp::TwoPartyClient client_;
  rpc::Gateway::Client gateway_;
  rpc::Dispatcher::Client dispatcher_;
};

}  // namespace dispatch::clients
