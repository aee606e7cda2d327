// DispatcherServer: the dispatcher serving behind a Frontend (frontend.h: the
// bound RPC and HTTP addresses): it recovers the state from a store, serves
// RPC through the gateway and its HTTP routes, runs the housekeeping on the
// front's tick, and shuts down gracefully (stop accepting, let in-flight
// replies reach the kernel, close storage, stop the loop). Single node:
// Start() opens the work dir's store, serves, and binds a Frontend of its own;
// tests and benchmarks embed it so, and the `dispatcher` binary is a flag
// parser around it. Otherwise it is built from ServingParts someone else
// prepared (an HA member, reactor/ha/member.h: a filled store, the state of
// exactly that store, a stage every write must pass too) and Serve() starts
// it behind their Frontend. It knows nothing of how those were made.
// REQUIRES: constructed, used and destroyed on the loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/log.h"
#include "common/protocol_version.h"
#include "common/status.h"
#include "reactor/closure_timings.h"
#include "reactor/closure_watchdog.h"
#include "reactor/data_service.h"
#include "reactor/data_service_options.h"
#include "reactor/durable_state.h"
#include "reactor/frontend.h"
#include "reactor/histogram.h"
#include "reactor/http_endpoints.h"
#include "reactor/journal_replicator.h"
#include "reactor/loop_pass_meter.h"
#include "reactor/metrics_exposition.h"
#include "reactor/off_loop.h"
#include "reactor/owner_thread_check.h"
#include "reactor/rpc_metrics.h"
#include "reactor/rpc_server.h"
#include "reactor/status_history.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/repeating_timer.h"
#include "schema/dispatcher.capnp.h"
#include "storage/store.h"

namespace dispatch::reactor {

struct DispatcherOptions {
  // "tcp:HOST:PORT" or "unix:PATH". Port 0 picks a free port.
  std::string listen = "tcp:127.0.0.1:5050";
  std::string work_dir = "dispatch-data";
  // Empty: the gateway accepts any token.
  std::string token;
  storage::Synchronous synchronous = storage::Synchronous::kFull;
  // WAL frames that make a checkpoint due (0: the store's default).
  int checkpoint_wal_frames = 0;
  // The store's limits on one journal record and one dataset definition
  // (0: the store's defaults; HA mode lowers them, reactor/ha/ha_limits.h).
  size_t max_record_bytes = 0;
  size_t max_dataset_bytes = 0;
  DurableStateOptions durable;
  uint64_t tick_ms = 100;
  uint64_t drain_timeout_ms = 5000;
  ServerLimits limits;
  DataServiceOptions data;
  // Where the operators' HTTP endpoints (/metrics, /healthz, /readyz,
  // /api/status, the status page /) listen: "tcp:HOST:PORT" (port 0 picks a
  // free one) or "unix:PATH"; "off": no HTTP. Off here, so embedders opt in;
  // the dispatcher binary's --http defaults to kDefaultHttp.
  std::string http = "off";
  // Open HTTP connections at once; more are closed on accept and counted.
  uint64_t http_max_connections = 64;
  // The closure watchdog: closures running with none finished for this long
  // are logged once per episode and counted (ClosureWatchdog); 0: off.
  uint64_t stuck_closure_warning_ms = 300000;
  // The oldest protocol version a peer may speak (Gateway.authenticate's
  // `protocol`); older peers are told to upgrade. Tests raise it to play a
  // release that dropped what today's peers speak.
  uint32_t oldest_peer_protocol = kOldestPeerProtocol;
};

inline constexpr const char* kDefaultHttp = "tcp:127.0.0.1:8050";

// The Frontend's settings and the work dir store's, as `options` sets them
// (single node; an HA member opens its cache with its own durability).
FrontendOptions FrontendOptionsFor(const DispatcherOptions& options);
storage::StoreOptions StoreOptionsFor(const DispatcherOptions& options);
// The start line of the log: version, bound address, work dir, status page.
void LogListening(const std::string& bound, const std::string& work_dir,
                  const std::string& http_url);

// What a server is built from when someone else prepared it.
struct ServingParts {
  // Bound; outlives the server.
  Frontend* front = nullptr;
  // The journal, filled.
  std::unique_ptr<storage::Store> store;
  // The state of exactly the store's snapshot and records, taken with no
  // replay; null: the store is replayed as after a restart.
  std::unique_ptr<state::DispatcherState> live;
  // A durability stage every write must pass too (the etcd journal); null:
  // none. Outlives the server.
  JournalReplicator* replicator = nullptr;
  // Families /metrics adds after the journal's (the embedder's own).
  MetricsExtra extra_metrics;
};

class DispatcherServer final : private Gate {
 public:
  // Single node: Start() opens the work dir's store and binds a Frontend.
  DispatcherServer(uvkj::UvAsyncIo& io, DispatcherOptions options);
  // Behind `parts.front`, from `parts`: Serve() starts it.
  DispatcherServer(uvkj::UvAsyncIo& io, DispatcherOptions options, ServingParts parts);
  ~DispatcherServer() noexcept(false);
  DispatcherServer(const DispatcherServer&) = delete;
  DispatcherServer& operator=(const DispatcherServer&) = delete;

  // Single node: opens the work dir's store, serves from it (Serve), and
  // binds the listen address (and the HTTP address unless it is "off");
  // returns the address actually bound ("tcp:127.0.0.1:41234"). Blocks on
  // the loop, so call it before the loop runs.
  Result<std::string> Start();
  // Recovers the state from the store (none to replay when a live state was
  // given), starts the services and timers, and takes over the front's
  // gateway, tick and HTTP routes (/readyz, /metrics, /api/status).
  Status Serve();
  // Where the status page is ("http://127.0.0.1:8050/"), or empty when HTTP
  // is off or the front is not bound yet.
  const std::string& http_url() const { return front_->http_url(); }

  // Stop at once, leaving the loop with `exit_code`: every parked reply
  // fails and nothing more is acknowledged (what the owner of the
  // replicator says when it can no longer be trusted: an HA member that
  // lost its leadership, kExitLeadershipLost).
  void StopAtOnce(const Status& why, int exit_code);
  // The embedder's families for /metrics (ServingParts::extra_metrics).
  const MetricsExtra& extra_metrics() const { return extra_metrics_; }

  // Graceful shutdown; the loop stops once it is done. Idempotent.
  void BeginShutdown(const char* why);
  bool shutting_down() const { return shutting_down_; }

  // For the services.
  Frontend& front() { return *front_; }
  const Frontend& front() const { return *front_; }
  RpcServer& rpc() { return front_->rpc(); }
  OwnerThreadCheck& loop_thread() { return front_->loop_thread(); }
  void FillVersion(rpc::Version::Builder version) const;
  void FillStats(rpc::ServerStats::Builder stats) const;
  uint64_t incarnation() const { return front_->incarnation(); }
  const DispatcherOptions& options() const { return options_; }
  uint64_t uptime_micros() const { return front_->uptime_micros(); }
  DurableState& durable() { return *durable_; }
  // Null before Serve() or after shutdown released it.
  const DurableState* durable_if_open() const { return durable_.get(); }
  RpcMetrics& rpc_metrics() { return front_->rpc_metrics(); }
  // Closure queue wait and execution times (this process's).
  const ClosureTimings& closure_timings() const { return closure_timings_; }
  // Stuck closures: episodes warned about, closures stuck now.
  const ClosureWatchdog& closure_watchdog() const { return closure_watchdog_; }
  // The last minutes of rates the status page plots (sampled by the tick).
  const StatusHistory& history() const { return history_; }
  // Null when HTTP is off.
  const HttpEndpoints* http() const { return front_->http(); }
  // Ready: recovered, serving, and the journal writable. Otherwise false and
  // `why` says what is missing.
  bool Ready(std::string* why) const;
  // Null before Start() and once shutdown released it.
  DataService* data() { return data_.get(); }
  // 0 after a clean stop; kExitStorageFailure after a failed commit.
  int exit_code() const { return exit_code_; }

 private:
  // The gate: open; each authenticated connection gets a DispatcherService.
  Status Open() const override { return Status::Ok(); }
  rpc::Dispatcher::Client Admit(RpcServer::ConnectionId id) override;
  void OnDisconnect(RpcServer::ConnectionId id) override;

  // The server's part of the front's tick: history, the closure watchdog.
  void Tick();
  void SampleHistory();
  void AddHttpRoutes();
  // A commit failed: no more acknowledgements; leave the loop at once.
  void StopOnStorageFailure(const Status& status);
  void StopServing(int exit_code, const Status& status);
  // The graceful stop: background work over, replies drained, then
  // everything closed in order and the loop stopped.
  kj::Promise<void> DrainThenStop(uint64_t deadline_ms);

  uvkj::UvAsyncIo& io_;
  const DispatcherOptions options_;
  // Single node: the server's own; else null (the front is the embedder's).
  std::unique_ptr<Frontend> owned_front_;
  Frontend* front_;
  std::unique_ptr<storage::Store> store_;  // holds the work dir's lock while open
  std::unique_ptr<DurableState> durable_;  // declared after store_: destroyed first
  // Holds worker capabilities and pushes waiting on durable_: released before
  // the connections and durable_ (see ~DispatcherServer and DrainThenStop).
  std::unique_ptr<DataService> data_;
  std::unique_ptr<state::DispatcherState> live_;  // until Serve() takes it
  JournalReplicator* const replicator_;
  const MetricsExtra extra_metrics_;
  StatusHistory history_;
  ClosureTimings closure_timings_;
  ClosureWatchdog closure_watchdog_;
  uint64_t next_sample_ms_ = 0;         // uv_now() of the next history sample
  uint64_t lag_since_sample_us_ = 0;    // the largest tick lateness since the last one
  bool shutting_down_ = false;
  // StopAtOnce's exit code, for the fatal handler it leads to (0: none).
  int stop_exit_code_ = 0;
  int exit_code_ = 0;
  kj::Promise<void> shutdown_ = nullptr;
};

}  // namespace dispatch::reactor
