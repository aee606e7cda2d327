// TransferServer: the worker's data-transfer service (data_transfer.capnp) on
// its transfer address, on the agent loop. One WorkerData object per
// connection; when a connection closes, its consumers are detached from their
// tasks, which hold their unacknowledged replies for their return on another
// connection (TaskProducer::DetachConsumer). Limits: connections, message
// size, time a call is held. WaitListening() may be called from any thread,
// ListenOnFreePort() on the thread that starts the agent before it does, the
// rest on the agent's.
#pragma once

#include <kj/io.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "clients/agent_service.h"
#include "clients/task_producer.h"
#include "common/status.h"

namespace dispatch::clients {

struct TransferServerOptions {
  // Empty: the agent's transfer address (or, without one, its worker address).
  std::string listen_address;
  uint32_t max_connections = 256;
  uint32_t max_wait_ms = 5000;  // longest a getElements call is held for an element
};

class TransferServer final : public AgentService {
 public:
  TransferServer(ProducerDirectory& directory, TransferServerOptions options);
  ~TransferServer() noexcept(false) override;

  // For a listen address with port 0 ("tcp:127.0.0.1:0"): binds and listens
  // now, on the calling thread, and returns the address with the port the
  // kernel picked, which Run() then serves. A worker calls it before its
  // agent starts, so the agent registers with the bound address, never with
  // port 0. InvalidArgument unless `address` is tcp with port 0; Unavailable
  // if it cannot listen. REQUIRES: before Run().
  Result<std::string> ListenOnFreePort(const std::string& address);

  kj::Promise<void> Run(AgentEnvironment& environment) override;

  // Waits until the server listens (ok) or failed to (its error); nullopt
  // at the deadline.
  std::optional<Status> WaitListening(std::chrono::milliseconds timeout);
  const std::string& address() const { return address_; }
  // Connections closed at once because max_connections were open.
  uint64_t refused_connections() const { return refused_connections_.load(); }

  class Session;  // one connection

 private:
  struct Connection;
  class ErrorHandler;

  kj::Promise<void> Listen(AgentEnvironment& environment);
  void CloseConnections();
  kj::Promise<void> Serve(kj::Own<kj::ConnectionReceiver> receiver, kj::Timer& timer);
  kj::Promise<void> AcceptLoop(kj::ConnectionReceiver& receiver, kj::Timer& timer);
  void SetListening(Status status);

  ProducerDirectory& directory_;
  const TransferServerOptions options_;
  std::string address_;
  kj::AutoCloseFd bound_;  // from ListenOnFreePort(), until Run() wraps it
  std::map<uint64_t, kj::Own<Connection>> connections_;
  uint64_t next_connection_ = 1;
  std::atomic<uint64_t> refused_connections_{0};  // read from any thread
  kj::Own<ErrorHandler> error_handler_;
  kj::Own<kj::TaskSet> tasks_;

  std::mutex mu_;  // guards listening_
  std::condition_variable listening_cv_;
  std::optional<Status> listening_;
};

}  // namespace dispatch::clients
