// DispatcherServer: the whole dispatcher process minus main(): it binds the
// listen address, serves RPC, runs the housekeeping timer, and shuts down
// gracefully (stop accepting, let in-flight replies reach the kernel, close
// storage, stop the loop). Tests and benchmarks embed it in-process; the
// `dispatcher` binary is a flag parser around it.
// REQUIRES: constructed, used and destroyed on the loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/log.h"
#include "common/status.h"
#include "reactor/closure_timings.h"
#include "reactor/closure_watchdog.h"
#include "reactor/data_service.h"
#include "reactor/data_service_options.h"
#include "reactor/durable_state.h"
#include "reactor/ha_status.h"
#include "reactor/histogram.h"
#include "reactor/loop_pass_meter.h"
#include "reactor/http_endpoints.h"
#include "reactor/journal_replicator.h"
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

inline constexpr uint32_t kProtocolVersion = 1;

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
  // HA mode (--etcd; docs/high_availability.md): Start() binds and serves
  // the gateway as a standby (every call Unavailable) without opening a
  // journal; an HA controller outside this library then fills a fresh local
  // store from etcd (OpenHaStore) and calls BecomeLeader. false: single node.
  bool ha = false;
};

inline constexpr const char* kDefaultHttp = "tcp:127.0.0.1:8050";

class DispatcherServer {
 public:
  DispatcherServer(uvkj::UvAsyncIo& io, DispatcherOptions options);
  ~DispatcherServer() noexcept(false);
  DispatcherServer(const DispatcherServer&) = delete;
  DispatcherServer& operator=(const DispatcherServer&) = delete;

  // Prepares the work dir and binds the listen address (and the HTTP
  // address unless it is "off"); returns the address actually bound
  // ("tcp:127.0.0.1:41234"). Blocks on the loop, so call it before the loop
  // runs.
  Result<std::string> Start();
  // After Start(): where the status page is ("http://127.0.0.1:8050/"), or
  // empty when HTTP is off.
  const std::string& http_url() const { return http_url_; }

  // HA mode only. Empties WORK_DIR/ha-cache (the local copy of the etcd
  // journal, rebuilt at every start) and opens a Store there for the caller
  // to fill. REQUIRES: not leading yet.
  Result<storage::Store*> OpenHaStore();
  // HA mode only: recovers the state from the store OpenHaStore opened (the
  // same Apply as a restart's replay; none when `live`, a hot standby's
  // state of exactly that store, is given), hands every later commit to
  // `replicator` (which must outlive this object's journal), starts the
  // timers and serves.
  Status BecomeLeader(JournalReplicator* replicator, std::unique_ptr<state::DispatcherState> live = nullptr);
  // HA mode: while not leading, the gateway answers "not the leader; the
  // leader is ADDRESS" (empty: none known yet).
  void SetStandbyOf(std::string leader_address);
  // True when the gateway hands out the dispatcher: always in single-node
  // mode; in HA mode once BecomeLeader succeeded.
  bool serving() const { return !options_.ha || leading_; }
  // The Unavailable error a standby's gateway answers with.
  Status NotLeaderError() const;
  // Leadership ended (lease lost, fenced): stop at once, exit code
  // kExitLeadershipLost; nothing more is acknowledged.
  void StopOnLeadershipLost(const Status& why);
  // Null unless leading in HA mode.
  const JournalReplicator* replicator() const { return replicator_; }
  // HA mode: where /metrics reads the member's HaStatus (set by its
  // HaController; empty in single-node mode).
  void SetHaStatusSource(HaStatusSource source) { ha_status_ = std::move(source); }
  const HaStatusSource& ha_status() const { return ha_status_; }

  // Graceful shutdown; the loop stops once it is done. Idempotent.
  void BeginShutdown(const char* why);
  bool shutting_down() const { return shutting_down_; }

  // For the services.
  RpcServer& rpc() { return *rpc_; }
  OwnerThreadCheck& loop_thread() { return loop_thread_; }
  bool TokenMatches(kj::ArrayPtr<const kj::byte> token) const;
  void FillVersion(rpc::Version::Builder version) const;
  void FillStats(rpc::ServerStats::Builder stats) const;
  uint64_t incarnation() const { return incarnation_; }
  const DispatcherOptions& options() const { return options_; }
  uint64_t uptime_micros() const;
  DurableState& durable() { return *durable_; }
  // Null while an HA standby (no journal yet) or after shutdown released it.
  const DurableState* durable_if_open() const { return durable_.get(); }
  RpcMetrics& rpc_metrics() { return *rpc_metrics_; }
  const uvkj::UvRepeatingTimer& tick() const { return *tick_; }
  // How late the housekeeping timer fired, each tick (seconds).
  const Histogram& loop_lag() const { return loop_lag_; }
  // How long each loop pass kept the loop busy.
  const LoopPassMeter& loop_passes() const { return *loop_passes_; }
  // Closure queue wait and execution times (this process's).
  const ClosureTimings& closure_timings() const { return closure_timings_; }
  // Stuck closures: episodes warned about, closures stuck now.
  const ClosureWatchdog& closure_watchdog() const { return closure_watchdog_; }
  // The last minutes of rates the status page plots (sampled by the tick).
  const StatusHistory& history() const { return history_; }
  // Null when HTTP is off.
  const HttpEndpoints* http() const { return http_.get(); }
  // Ready: recovered, serving, and the journal writable. Otherwise false and
  // `why` says what is missing.
  bool Ready(std::string* why) const;
  // Null before Start() and once shutdown released it.
  DataService* data() { return data_.get(); }
  // 0 after a clean stop; kExitStorageFailure after a failed commit.
  int exit_code() const { return exit_code_; }

 private:
  void Tick();
  void SampleHistory();
  Status StartHttp();
  // A commit failed: no more acknowledgements; leave the loop at once.
  void StopOnStorageFailure(const Status& status);
  void StopServing(int exit_code, const Status& status);
  // Opens the journal (single node: the work dir's) and starts the services on it.
  Status StartServices(std::unique_ptr<state::DispatcherState> live = nullptr);
  // The graceful stop: background work over, replies drained, then
  // everything closed in order and the loop stopped.
  kj::Promise<void> DrainThenStop(uint64_t deadline_ms);
  // Resolves once every reply was handed to the kernel, or at the deadline.
  kj::Promise<void> DrainReplies(uint64_t deadline_ms);

  uvkj::UvAsyncIo& io_;
  const DispatcherOptions options_;
  const uint64_t incarnation_;
  const uint64_t start_ns_;
  OwnerThreadCheck loop_thread_;
  std::string unix_socket_path_;  // removed on shutdown
  std::unique_ptr<storage::Store> store_;  // holds the work dir's lock while open
  std::unique_ptr<DurableState> durable_;  // declared after store_: destroyed first
  // Holds worker capabilities and pushes waiting on durable_: released before
  // the connections and durable_ (see ~DispatcherServer and DrainThenStop).
  std::unique_ptr<DataService> data_;
  // Before rpc_: coordinator sessions and calls in flight hold references.
  kj::Own<RpcMetrics> rpc_metrics_;
  kj::Own<RpcServer> rpc_;
  std::unique_ptr<uvkj::UvRepeatingTimer> tick_;
  Histogram loop_lag_{Histogram::SecondsBounds()};
  std::unique_ptr<LoopPassMeter> loop_passes_;
  StatusHistory history_;
  ClosureTimings closure_timings_;
  ClosureWatchdog closure_watchdog_;
  uint64_t next_sample_ms_ = 0;         // uv_now() of the next history sample
  uint64_t lag_since_sample_us_ = 0;    // the largest tick lateness since the last one
  // Formats scrapes on the thread pool; after everything its routes read.
  std::unique_ptr<OffLoop> off_loop_;
  // After everything its routes read: destroyed first.
  std::unique_ptr<HttpEndpoints> http_;
  std::string http_url_;
  bool shutting_down_ = false;
  HaStatusSource ha_status_;
  bool leading_ = false;               // HA mode: BecomeLeader succeeded
  std::string standby_of_;             // HA mode: the leader's address, when known
  JournalReplicator* replicator_ = nullptr;
  int exit_code_ = 0;
  kj::Promise<void> shutdown_ = nullptr;
};

}  // namespace dispatch::reactor
