#include "reactor/dispatcher_server.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>

#include <kj/debug.h>

#include "common/address.h"
#include "reactor/metrics_exposition.h"
#include "reactor/services.h"
#include "reactor/status_document.h"
#include "reactor/status_page.h"
#include "state/task_routing.h"

#ifndef DISPATCH_VERSION
#define DISPATCH_VERSION "dev"
#endif

namespace dispatch::reactor {
namespace {

uint64_t RandomIncarnation() {
  std::random_device device;
  uint64_t value = (static_cast<uint64_t>(device()) << 32) | device();
  return value == 0 ? 1 : value;
}

// A Unix socket path left by a dispatcher that died: nobody accepts on it.
void RemoveStaleUnixSocket(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool alive = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  int error = errno;
  close(fd);
  if (!alive && error == ECONNREFUSED) unlink(path.c_str());
}

}  // namespace

DispatcherServer::DispatcherServer(uvkj::UvAsyncIo& io, DispatcherOptions options)
    : io_(io),
      options_(std::move(options)),
      incarnation_(RandomIncarnation()),
      start_ns_(uv_hrtime()),
      closure_watchdog_(options_.stuck_closure_warning_ms) {
  loop_thread_.Bind();
  rpc_metrics_ = kj::refcounted<RpcMetrics>();
  rpc_ = kj::heap<RpcServer>(io_, options_.limits, [this](RpcServer::ConnectionId id) {
    return capnp::Capability::Client(kj::heap<GatewayService>(*this, id));
  });
  tick_ = std::make_unique<uvkj::UvRepeatingTimer>(io_.loop(), options_.tick_ms, [this]() { Tick(); });
  loop_passes_ = std::make_unique<LoopPassMeter>(io_.loop());
}

DispatcherServer::~DispatcherServer() noexcept(false) {
  http_.reset();
  off_loop_.reset();
  shutdown_ = nullptr;
  io_.port().SetPassEndHook(nullptr);
  tick_.reset();
  loop_passes_.reset();
  data_.reset();
  rpc_ = nullptr;
  durable_.reset();
  store_.reset();
  if (!unix_socket_path_.empty()) unlink(unix_socket_path_.c_str());
}

Result<std::string> DispatcherServer::Start() {
  if (!options_.ha) {
    storage::StoreOptions store_options;
    store_options.work_dir = options_.work_dir;
    store_options.synchronous = options_.synchronous;
    if (options_.checkpoint_wal_frames > 0) store_options.checkpoint_wal_frames = options_.checkpoint_wal_frames;
    // The loop writes each group commit; its fsync runs on the thread pool
    // (DurableState), so the loop serves on while the disk syncs.
    store_options.defer_sync = true;
    store_options.max_result_bytes = options_.data.closures.max_result_bytes;
    if (options_.max_record_bytes > 0) store_options.max_record_bytes = options_.max_record_bytes;
    if (options_.max_dataset_bytes > 0)
      store_options.max_dataset_bytes = options_.max_dataset_bytes;
    auto store = storage::Store::Open(store_options);
    if (!store.ok()) return store.status();
    store_ = std::move(store.value());
    DISPATCH_RETURN_IF_ERROR(StartServices());
  }
  rpc_->AddDisconnectListener([this](RpcServer::ConnectionId id) {
    if (data_ != nullptr && !shutting_down_) data_->workers().OnDisconnect(id);
  });

  Result<std::string> address = ToKjAddress(options_.listen);
  if (!address.ok()) return address.status();
  bool is_unix = address->rfind("unix:", 0) == 0;
  if (is_unix) RemoveStaleUnixSocket(address->substr(5));

  kj::Own<kj::ConnectionReceiver> receiver;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                auto parsed = io_.network().parseAddress(address->c_str()).wait(io_.wait_scope());
                receiver = parsed->listen();
              })) {
    return UnavailableError("cannot listen on " + options_.listen + ": " + e->getDescription().cStr());
  }

  std::string bound;
  if (is_unix) {
    unix_socket_path_ = address->substr(5);
    bound = options_.listen;
  } else {
    std::string host = address->substr(0, address->rfind(':'));
    bound = "tcp:" + host + ":" + std::to_string(receiver->getPort());
  }
  rpc_->Listen(kj::mv(receiver));
  DISPATCH_RETURN_IF_ERROR(StartHttp());
  tick_->Start();
  Log(LogLevel::kInfo, "dispatcher ", DISPATCH_VERSION, " listening on ", bound.c_str(),
      ", work dir ", options_.work_dir.c_str(),
      http_url_.empty() ? std::string(", HTTP off") : ", status page on " + http_url_);
  return bound;
}

Status DispatcherServer::StartServices(std::unique_ptr<state::DispatcherState> live) {
  const bool took_live = live != nullptr;
  auto durable = DurableState::Recover(io_.loop(), *store_, options_.durable, std::move(live));
  if (!durable.ok()) return durable.status();
  durable_ = std::move(durable.value());
  if (replicator_ != nullptr) durable_->SetReplicator(replicator_);
  durable_->pipeline().SetFatalHandler([this](const Status& status) { StopOnStorageFailure(status); });
  durable_->pipeline().AddAppliedObserver([this](const state::Effects& effects) {
    closure_timings_.Observe(effects, uv_hrtime());
    closure_watchdog_.OnApplied(effects);
  });
  // Every loop pass ends with the group commit and what must follow it
  // (DurableState::EndOfPass lists the steps).
  io_.port().SetPassEndHook([this]() { durable_->EndOfPass(); });
  const RecoveryStats& recovered = durable_->recovery();
  if (took_live) {
    Log(LogLevel::kInfo, "took the standby's live state over (last sequence number ", store_->last_seq(), ") in ",
        recovered.recovery_micros / 1000, " ms: nothing to replay");
  } else {
    Log(LogLevel::kInfo, "recovered state: snapshot at ", store_->snapshot_seq(), " + ", recovered.replayed,
        " journal records in ", recovered.recovery_micros / 1000, " ms (last sequence number ",
        store_->last_seq(), ")");
  }
  data_ = std::make_unique<DataService>(io_.loop(), *durable_, options_.data, incarnation_);
  return data_->Start();
}

Result<storage::Store*> DispatcherServer::OpenHaStore() {
  KJ_REQUIRE(options_.ha && !leading_ && durable_ == nullptr, "OpenHaStore outside an HA standby");
  store_.reset();
  const std::string dir = options_.work_dir + "/ha-cache";
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  if (error) return UnavailableError("cannot empty " + dir + ": " + error.message());
  std::filesystem::create_directories(dir, error);
  if (error) return UnavailableError("cannot create " + dir + ": " + error.message());
  storage::StoreOptions store_options;
  store_options.work_dir = dir;
  // A cache of the etcd journal: durability is etcd's, so no fsync here.
  store_options.synchronous = storage::Synchronous::kNormal;
  store_options.defer_sync = false;
  store_options.max_result_bytes = options_.data.closures.max_result_bytes;
  if (options_.max_record_bytes > 0) store_options.max_record_bytes = options_.max_record_bytes;
  if (options_.max_dataset_bytes > 0) store_options.max_dataset_bytes = options_.max_dataset_bytes;
  auto store = storage::Store::Open(store_options);
  if (!store.ok()) return store.status();
  store_ = std::move(store.value());
  return store_.get();
}

Status DispatcherServer::BecomeLeader(JournalReplicator* replicator, std::unique_ptr<state::DispatcherState> live) {
  KJ_REQUIRE(options_.ha && !leading_ && store_ != nullptr, "BecomeLeader without OpenHaStore");
  replicator_ = replicator;
  DISPATCH_RETURN_IF_ERROR(StartServices(std::move(live)));
  leading_ = true;
  standby_of_.clear();
  Log(LogLevel::kInfo, "leading: serving as the HA leader");
  return Status::Ok();
}

void DispatcherServer::SetStandbyOf(std::string leader_address) { standby_of_ = std::move(leader_address); }

Status DispatcherServer::NotLeaderError() const {
  if (standby_of_.empty()) return UnavailableError("not the leader; no leader is known yet");
  return UnavailableError("not the leader; the leader is " + standby_of_);
}

void DispatcherServer::StopOnLeadershipLost(const Status& why) {
  if (exit_code_ != 0) return;
  if (durable_ != nullptr && !durable_->pipeline().failed()) {
    // Fails every parked reply; its fatal handler stops the server.
    durable_->ReplicationFailed(why);
    return;
  }
  StopServing(kExitLeadershipLost, why);
}

Status DispatcherServer::StartHttp() {
  if (options_.http == "off") return Status::Ok();
  Result<std::string> address = ToKjAddress(options_.http);
  if (!address.ok()) {
    return InvalidArgumentError("--http: " + address.status().message());
  }
  HttpEndpointsOptions http_options;
  http_options.kj_address = *address;
  http_options.token = options_.token;
  http_options.max_connections = options_.http_max_connections;
  http_ = std::make_unique<HttpEndpoints>(io_, http_options);
  off_loop_ = std::make_unique<OffLoop>(io_.loop());
  http_->AddRoute("/healthz", []() -> kj::Promise<HttpReply> {
    return HttpReply{200, "text/plain; charset=utf-8", "ok\n"};
  });
  http_->AddRoute("/readyz", [this]() -> kj::Promise<HttpReply> {
    std::string why;
    if (Ready(&why)) return HttpReply{200, "text/plain; charset=utf-8", "ready\n"};
    if (options_.ha && !leading_ && !shutting_down_) {
      return HttpReply{503, "text/plain; charset=utf-8", why + "\n"};
    }
    return HttpReply{503, "text/plain; charset=utf-8", "not ready: " + why + "\n"};
  });
  // The loop copies the figures; the thread pool formats them.
  http_->AddRoute("/metrics", [this]() -> kj::Promise<HttpReply> {
    auto families = std::make_shared<std::vector<prometheus::MetricFamily>>(CollectMetrics(*this));
    return off_loop_->Run([families]() { return SerializeMetrics(*families); })
        .then([](std::string text) {
          return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8", std::move(text)};
        });
  });
  http_->AddRoute("/api/status", [this]() -> kj::Promise<HttpReply> {
    auto doc = std::make_shared<Json>(CollectStatus(*this));
    return off_loop_->Run([doc]() { return doc->Encode(); }).then([](std::string text) {
      return HttpReply{200, "application/json", std::move(text)};
    });
  });
  // The page holds no data (it asks /api/status, with the token), so a
  // browser that cannot send a header may load it.
  http_->AddRoute(
      "/",
      []() -> kj::Promise<HttpReply> {
        return HttpReply{200, "text/html; charset=utf-8", std::string(StatusPageHtml())};
      },
      /*is_public=*/true);
  Result<unsigned> port = http_->Listen();
  if (!port.ok()) {
    http_.reset();
    return UnavailableError("--http=" + options_.http + ": " + port.status().message());
  }
  if (address->rfind("unix:", 0) == 0) {
    http_url_ = "http+" + *address;
  } else {
    http_url_ = "http://" + address->substr(0, address->rfind(':')) + ":" + std::to_string(*port) + "/";
  }
  return Status::Ok();
}

void DispatcherServer::SampleHistory() {
  next_sample_ms_ = uv_now(io_.loop()) + 1000;
  if (durable_ == nullptr || data_ == nullptr) return;
  StatusCounters counters;
  counters.unix_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  counters.closures_finished = data_->closures().counters().results_accepted;
  counters.heartbeats = data_->workers().stats().heartbeats;
  counters.commit_seconds = &durable_->pipeline().commit_seconds();
  counters.loop_lag_max_us = lag_since_sample_us_;
  lag_since_sample_us_ = 0;
  history_.Sample(counters);
}

uint64_t DispatcherServer::uptime_micros() const { return (uv_hrtime() - start_ns_) / 1000; }

bool DispatcherServer::Ready(std::string* why) const {
  if (shutting_down_) {
    *why = "shutting down";
    return false;
  }
  if (options_.ha && !leading_) {
    *why = standby_of_.empty() ? "standby, no leader known yet" : "standby of " + standby_of_;
    return false;
  }
  if (durable_ == nullptr || data_ == nullptr) {
    *why = "recovering";
    return false;
  }
  if (durable_->pipeline().failed()) {
    *why = "the journal failed: " + durable_->pipeline().failure().ToString();
    return false;
  }
  return true;
}

void DispatcherServer::StopOnStorageFailure(const Status& status) {
  // A store that refused a batch as input is healthy: that stop is a bug of
  // ours (see DurableState::SetFatalHandler), told apart from the disk's.
  // In HA mode a failed replication (leadership lost, fenced) has its own.
  StopServing(durable_->replication_failed() ? kExitLeadershipLost
              : store_->failed()             ? kExitStorageFailure
                                             : kExitInternalError,
              status);
}

void DispatcherServer::StopServing(int exit_code, const Status& status) {
  exit_code_ = exit_code;
  Log(LogLevel::kError, "exiting with code ", exit_code_, ": ", status.ToString().c_str());
  shutting_down_ = true;
  if (http_ != nullptr) http_->Stop();
  rpc_->StopAccepting();
  rpc_->CloseAll();
  tick_->Stop();
  if (data_ != nullptr) data_->StopTimers();
  // The pass-end hook stays: we may be running inside it, and a failed
  // DurableState commits nothing more.
  io_.Stop();
}

void DispatcherServer::Tick() {
  loop_thread_.Check();
  loop_lag_.Observe(static_cast<double>(tick_->last_lateness_us()) * 1e-6);
  lag_since_sample_us_ = std::max(lag_since_sample_us_, tick_->last_lateness_us());
  if (uv_now(io_.loop()) >= next_sample_ms_) SampleHistory();
  if (durable_ != nullptr && data_ != nullptr && !shutting_down_) {
    closure_watchdog_.Check(durable_->state(), durable_->pipeline().NowMicros(), closure_timings_, uv_hrtime());
  }
  rpc_->EnforceLimits();
}

bool DispatcherServer::TokenMatches(kj::ArrayPtr<const kj::byte> token) const {
  if (options_.token.empty()) return true;
  if (token.size() != options_.token.size()) return false;
  // Constant time in the token's bytes: no early exit on the first mismatch.
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= token[i] ^ static_cast<unsigned char>(options_.token[i]);
  return diff == 0;
}

void DispatcherServer::FillVersion(rpc::Version::Builder version) const {
  version.setProtocol(kProtocolVersion);
  version.setBuild(DISPATCH_VERSION);
  version.setIncarnation(incarnation_);
}

void DispatcherServer::FillStats(rpc::ServerStats::Builder stats) const {
  const ServerCounters& c = rpc_->counters();
  stats.setUptimeMicros(uptime_micros());
  stats.setConnectionsOpen(rpc_->connection_count());
  stats.setConnectionsAccepted(c.connections_accepted);
  stats.setCallsTotal(c.calls_total);
  stats.setCallsInFlight(c.calls_in_flight);
  stats.setRefusedOverConnectionLimit(c.refused_over_connection_limit);
  stats.setClosedHandshakeTimeout(c.closed_handshake_timeout);
  stats.setClosedOutboundBytes(c.closed_outbound_bytes);
  stats.setClosedCallsInFlight(c.closed_calls_in_flight);
  stats.setAuthenticationFailures(c.authentication_failures);
  stats.setTicks(tick_->ticks());
  stats.setTickIntervalMicros(tick_->interval_ms() * 1000);
  stats.setMaxTickLatenessMicros(tick_->max_lateness_us());
  stats.setLoopPasses(loop_passes_->passes());
  stats.setMaxLoopPassMicros(loop_passes_->max_busy_ns() / 1000);
  stats.setLoopPassesOver10Ms(loop_passes_->passes_over_10ms());
  stats.setLoopThreadId(loop_thread_.NumericId());
  stats.setCallbacksOffLoopThread(loop_thread_.violations());
  stats.setRefusedOverAddressLimit(c.refused_over_address_limit);
  stats.setClosedMessageTimeout(c.closed_message_timeout);
  stats.setClosedOversizedMessage(c.guard.oversized_messages);
  const PeerMemoryBudget& budget = rpc_->peer_memory();
  stats.setPeerMemoryLimitBytes(budget.limit());
  stats.setPeerMemoryUsedBytes(budget.used());
  stats.setPeerMemoryHighWaterBytes(budget.counters().high_water_bytes);
  stats.setPeerMemoryQueuedReplyBytes(rpc_->outbound_charged());
  stats.setPeerMemoryWaits(c.guard.budget_waits);
  stats.setPeerMemoryWaiting(budget.waiting());
  stats.setPeerMemoryRefusals(c.guard.budget_refusals);
  stats.setClosedOutboundOverBudget(c.closed_outbound_over_budget);
  if (data_ != nullptr) {
    stats.setClosuresWithoutWorker(data_->closures().NumUnrunnable());
    stats.setJobsWithoutWorker(state::JobsWithoutWorker(data_->state()));
  }
}

void DispatcherServer::BeginShutdown(const char* why) {
  loop_thread_.Check();
  if (shutting_down_) {
    Log(LogLevel::kInfo, "shutdown already in progress (", why, ")");
    return;
  }
  shutting_down_ = true;
  Log(LogLevel::kInfo, "shutting down (", why, "): no new connections, draining replies");
  rpc_->StopAccepting();
  if (!unix_socket_path_.empty()) {
    unlink(unix_socket_path_.c_str());
    unix_socket_path_.clear();
  }
  uint64_t deadline = uv_now(io_.loop()) + options_.drain_timeout_ms;
  shutdown_ = DrainThenStop(deadline).eagerlyEvaluate([this](kj::Exception&& e) {
    Log(LogLevel::kError, "shutdown failed: ", e.getDescription());
    io_.Stop();
  });
}

kj::Promise<void> DispatcherServer::DrainThenStop(uint64_t deadline_ms) {
  // A checkpoint or snapshot task on the thread pool must be over before the
  // Store closes: none starts from now on, a snapshot task is cancelled
  // (shutdown writes its own), and what still runs is awaited here, so that
  // destroying durable_ below never has work in flight.
  kj::Promise<void> background = durable_ != nullptr ? durable_->StopBackgroundWork()
                                                     : kj::Promise<void>(kj::READY_NOW);
  return background.then([this, deadline_ms]() { return DrainReplies(deadline_ms); })
      .then([this]() {
        if (data_ != nullptr) data_->StopTimers();
        if (http_ != nullptr) http_->Stop();
        rpc_->CloseAll();
        tick_->Stop();
        // A snapshot makes the next start-up a load instead of a replay.
        // Closing the store checkpoints the WAL into the database and
        // releases the work dir's lock: the next dispatcher starts from a
        // tidy file.
        io_.port().SetPassEndHook(nullptr);
        if (durable_ != nullptr) {
          durable_->pipeline().CommitNow();
          Status snapshot = durable_->compaction().Snapshot();
          if (!snapshot.ok()) {
            Log(LogLevel::kWarning, "no snapshot at shutdown: ", snapshot.ToString().c_str());
          }
        }
        data_.reset();
        durable_.reset();
        store_.reset();
        // Let the close events run, then leave uv_run.
        return kj::evalLater([this]() {
          Log(LogLevel::kInfo, "shutdown complete");
          io_.Stop();
        });
      });
}

kj::Promise<void> DispatcherServer::DrainReplies(uint64_t deadline_ms) {
  // Replies already computed sit in each connection's outbound queue until
  // the kernel takes them; wait for that (or the deadline).
  if (!rpc_->Quiescent() && uv_now(io_.loop()) < deadline_ms) {
    return io_.timer().afterDelay(2 * kj::MILLISECONDS).then([this, deadline_ms]() {
      return DrainReplies(deadline_ms);
    });
  }
  if (!rpc_->Quiescent()) Log(LogLevel::kWarning, "drain deadline passed with replies still queued");
  return kj::READY_NOW;
}

}  // namespace dispatch::reactor
