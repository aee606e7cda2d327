// Frontend: what a dispatcher process shows the world for its whole life,
// whatever serves behind it: the RPC listener (RpcServer, its limits and
// per-method metrics) with its gateway, the operators' HTTP endpoints, the
// housekeeping tick that enforces the RPC limits and measures loop lag, and
// the process's incarnation. A DispatcherServer serves behind it; in HA mode
// an HA member (reactor/ha/member.h) keeps it bound while it is a standby and
// builds the server behind it only once elected, so clients and scrapers find
// the same ports in every role.
// The gateway checks the peer's token and hands out what its Gate admits;
// while no gate is set, or the gate is closed, every authenticate gets the
// gate's refusal instead (checked before the token).
// REQUIRES: constructed, used and destroyed on the loop thread.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/protocol_version.h"
#include "common/status.h"
#include "reactor/histogram.h"
#include "reactor/http_endpoints.h"
#include "reactor/loop_pass_meter.h"
#include "reactor/off_loop.h"
#include "reactor/owner_thread_check.h"
#include "reactor/rpc_metrics.h"
#include "reactor/rpc_server.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/repeating_timer.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::reactor {

struct FrontendOptions {
  // "tcp:HOST:PORT" or "unix:PATH". Port 0 picks a free port.
  std::string listen = "tcp:127.0.0.1:5050";
  // Empty: the gateway accepts any token.
  std::string token;
  ServerLimits limits;
  uint64_t tick_ms = 100;
  // "tcp:HOST:PORT", "unix:PATH" or "off" (DispatcherOptions::http).
  std::string http = "off";
  uint64_t http_max_connections = 64;
  // The process's incarnation (0: draw a random one).
  uint64_t incarnation = 0;
  // The oldest protocol a peer may speak (DispatcherOptions).
  uint32_t oldest_peer_protocol = kOldestPeerProtocol;
};

// What the gateway hands out to an authenticated peer.
class Gate {
 public:
  // noexcept(false): the owners (DispatcherServer, HaMember) may throw
  // from their destructors, as KJ objects do.
  virtual ~Gate() noexcept(false) = default;
  // Ok when peers may be admitted; otherwise what every authenticate gets,
  // before the token is checked (an HA standby: "not the leader").
  virtual Status Open() const = 0;
  // The Dispatcher for connection `id`, which just authenticated.
  // REQUIRES: Open() is ok.
  virtual rpc::Dispatcher::Client Admit(RpcServer::ConnectionId id) = 0;
  // Connection `id` is gone, whatever the reason.
  virtual void OnDisconnect(RpcServer::ConnectionId id) { (void)id; }
};

class Frontend {
 public:
  Frontend(uvkj::UvAsyncIo& io, FrontendOptions options);
  ~Frontend() noexcept(false);
  Frontend(const Frontend&) = delete;
  Frontend& operator=(const Frontend&) = delete;

  // Binds the listen address and, unless it is "off", the HTTP address
  // (with /healthz and the status page /; whoever serves adds /readyz,
  // /metrics and /api/status), and starts the tick; returns the address
  // actually bound ("tcp:127.0.0.1:41234"). Blocks on the loop, so call it
  // before the loop runs.
  Result<std::string> Bind();
  // After Bind(): where the status page is ("http://127.0.0.1:8050/"), or
  // empty when HTTP is off.
  const std::string& http_url() const { return http_url_; }

  // What the gateway admits to; null: nothing (every authenticate is
  // Unavailable). The gate outlives its time here.
  void SetGate(Gate* gate) { gate_ = gate; }
  // Run at every tick, after the loop lag is measured and before the RPC
  // limits are enforced (a server's housekeeping); null: none.
  void SetTickHook(std::function<void()> hook) { tick_hook_ = std::move(hook); }

  // Stops accepting RPC connections (and removes a Unix socket's path).
  void StopAccepting();
  // A graceful shutdown's first steps, the same in every role. The role's
  // own `*shutting_down` flag makes it happen once: set already, a second
  // request is logged and nullopt returned. Otherwise sets it, logs `why`,
  // stops accepting and returns the deadline (uv_now milliseconds) that
  // DrainReplies is then given. REQUIRES: on the loop thread.
  std::optional<uint64_t> StartDrain(bool* shutting_down, const char* why,
                                     uint64_t drain_timeout_ms);
  // Closes every RPC connection and stops the HTTP endpoints and the tick.
  void Close();
  // Resolves once every reply was handed to the kernel, or at the deadline
  // (uv_now milliseconds).
  kj::Promise<void> DrainReplies(uint64_t deadline_ms);

  // For the gateway and whoever serves.
  bool TokenMatches(kj::ArrayPtr<const kj::byte> token) const;
  const FrontendOptions& options() const { return options_; }
  Gate* gate() const { return gate_; }
  RpcServer& rpc() { return *rpc_; }
  const RpcServer& rpc() const { return *rpc_; }
  RpcMetrics& rpc_metrics() { return *rpc_metrics_; }
  OwnerThreadCheck& loop_thread() { return loop_thread_; }
  const OwnerThreadCheck& loop_thread() const { return loop_thread_; }
  // Null when HTTP is off.
  HttpEndpoints* http() { return http_.get(); }
  const HttpEndpoints* http() const { return http_.get(); }
  // Formats scrapes on the thread pool. Null when HTTP is off.
  OffLoop* off_loop() { return off_loop_.get(); }
  uint64_t incarnation() const { return incarnation_; }
  uint64_t uptime_micros() const;
  const uvkj::UvRepeatingTimer& tick() const { return *tick_; }
  // How late the housekeeping timer fired, each tick (seconds).
  const Histogram& loop_lag() const { return loop_lag_; }
  // How long each loop pass kept the loop busy.
  const LoopPassMeter& loop_passes() const { return *loop_passes_; }

 private:
  void Tick();
  Status StartHttp();

  uvkj::UvAsyncIo& io_;
  const FrontendOptions options_;
  const uint64_t incarnation_;
  const uint64_t start_ns_;
  OwnerThreadCheck loop_thread_;
  std::string unix_socket_path_;  // removed on StopAccepting and destruction
  Gate* gate_ = nullptr;
  std::function<void()> tick_hook_;
  // Before rpc_: coordinator sessions and calls in flight hold references.
  kj::Own<RpcMetrics> rpc_metrics_;
  kj::Own<RpcServer> rpc_;
  std::unique_ptr<uvkj::UvRepeatingTimer> tick_;
  Histogram loop_lag_{Histogram::SecondsBounds()};
  std::unique_ptr<LoopPassMeter> loop_passes_;
  std::unique_ptr<OffLoop> off_loop_;
  // After everything its routes read: destroyed first.
  std::unique_ptr<HttpEndpoints> http_;
  std::string http_url_;
};

// The gateway: the bootstrap capability of every connection, the only thing
// reachable before authentication.
class GatewayService final : public rpc::Gateway::Server {
 public:
  GatewayService(Frontend& front, RpcServer::ConnectionId connection)
      : front_(front), connection_(connection) {}

  // Every failed call's exception carries a code (DispatchWithPeerErrors).
  DispatchCallResult dispatchCall(
      uint64_t interface_id, uint16_t method_id,
      capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) override;
  kj::Promise<void> authenticate(AuthenticateContext context) override;

 private:
  // A peer that keeps guessing tokens is cut off.
  static constexpr int kMaxFailedAttempts = 3;

  Frontend& front_;
  const RpcServer::ConnectionId connection_;
  int failed_attempts_ = 0;
};

}  // namespace dispatch::reactor
