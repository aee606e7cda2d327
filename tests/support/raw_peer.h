// RawPeer: a peer of the dispatcher built from the generated schema and Cap'n
// Proto alone (no clients/, common/ or reactor/ code): its own KJ event loop,
// a TwoPartyClient on one connection, the Gateway as bootstrap. It sees what
// a client in another language sees, so tests of the wire contract use it.
// One per thread at a time (KJ allows one event loop per thread): destroy it
// before anything else on the thread runs a KJ loop. Every wait has a deadline.
#pragma once

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/debug.h>

#include <optional>
#include <string>

#include "schema/dispatcher.capnp.h"

namespace dispatch::testing {

class RawPeer {
 public:
  // `address`: "tcp:HOST:PORT" or "unix:PATH" (the dispatcher's own form).
  explicit RawPeer(const std::string& address) : io_(kj::setupAsyncIo()) {
    const std::string kj_address = address.rfind("tcp:", 0) == 0 ? address.substr(4) : address;
    stream_ = Wait(io_.provider->getNetwork().parseAddress(kj_address).then(
        [](kj::Own<kj::NetworkAddress> a) { return a->connect().attach(kj::mv(a)); }));
    client_ = kj::heap<capnp::TwoPartyClient>(*stream_);
    gateway_ = client_->bootstrap().castAs<rpc::Gateway>();
  }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  rpc::Gateway::Client& gateway() { return gateway_; }

  // The Dispatcher for `token` (throws the gateway's exception if refused).
  rpc::Dispatcher::Client Authenticate(const std::string& token = "") {
    auto request = gateway_.authenticateRequest();
    request.setToken(
        kj::arrayPtr(reinterpret_cast<const kj::byte*>(token.data()), token.size()));
    return Wait(request.send()).getDispatcher();
  }

  // Waits for `promise` (30 s at most: a hung dispatcher fails the test).
  template <typename T>
  T Wait(kj::Promise<T> promise) {
    return io_.provider->getTimer()
        .timeoutAfter(30 * kj::SECONDS, kj::mv(promise))
        .wait(io_.waitScope);
  }

  // The exception `promise` ends with; nullopt if it succeeded.
  template <typename T>
  std::optional<kj::Exception> Failure(kj::Promise<T> promise) {
    std::optional<kj::Exception> failure;
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { Wait(kj::mv(promise)); })) {
      failure.emplace(kj::mv(*e));
    }
    return failure;
  }

 private:
  kj::AsyncIoContext io_;
  kj::Own<kj::AsyncIoStream> stream_;
  kj::Own<capnp::TwoPartyClient> client_;
  rpc::Gateway::Client gateway_ = nullptr;
};

}  // namespace dispatch::testing
