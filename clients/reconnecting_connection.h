// ReconnectingConnection: a dispatcher connection that comes back, for
// loop-thread clients (JobClient) that must outlive a dispatcher restart.
// Ready() resolves once a connection is up, connecting first when there is
// none, with jittered exponential backoff between failed attempts; a dropped
// connection is forgotten at once. Each connection has a generation number so
// a stale failure never drops its successor. Not thread-safe.
#pragma once

#include <kj/async-io.h>
#include <kj/timer.h>

#include <cstdint>
#include <string>

#include "clients/backoff.h"
#include "clients/dispatcher_connection.h"

namespace dispatch::clients {

class ReconnectingConnection {
 public:
  ReconnectingConnection(kj::Network& network, kj::Timer& timer, std::string address,
                         std::string token = "", uint64_t seed = 1,
                         uint64_t backoff_initial_ms = 50, uint64_t backoff_max_ms = 2000);
  ReconnectingConnection(const ReconnectingConnection&) = delete;
  ReconnectingConnection& operator=(const ReconnectingConnection&) = delete;

  // Resolves when connected (now, or after as many attempts as it takes);
  // `address` may be a list (DispatcherConnection::Connect walks it). Rejects
  // only for a malformed address list.
  kj::Promise<void> Ready();
  // The live connection's dispatcher; one whose calls fail as DISCONNECTED
  // when there is none.
  rpc::Dispatcher::Client dispatcher();
  // Increases with every new connection; 0 before the first.
  uint64_t generation() const { return generation_; }
  bool connected() const { return connection_.get() != nullptr; }
  // Forgets connection `generation` if it is still the current one (a call
  // on it failed as DISCONNECTED).
  void Drop(uint64_t generation);

 private:
  kj::Promise<void> Connect();

  kj::Network& network_;
  kj::Timer& timer_;
  const std::string address_;  // as given: one address or a list
  const Result<DispatcherAddresses> addresses_;  // remembers the leader of a list
  const std::string token_;
  Backoff backoff_;
  kj::Own<DispatcherConnection> connection_;
  uint64_t generation_ = 0;
  kj::Maybe<kj::ForkedPromise<void>> connecting_;
  bool connecting_in_progress_ = false;
  kj::Promise<void> watch_ = nullptr;  // resolves when the current connection drops
};

}  // namespace dispatch::clients
