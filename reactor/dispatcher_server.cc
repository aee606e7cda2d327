#include "reactor/dispatcher_server.h"

#include <kj/debug.h>

#include <algorithm>
#include <chrono>

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

FrontendOptions FrontendOptionsFor(const DispatcherOptions& options) {
  FrontendOptions front;
  front.listen = options.listen;
  front.token = options.token;
  front.limits = options.limits;
  front.tick_ms = options.tick_ms;
  front.http = options.http;
  front.http_max_connections = options.http_max_connections;
  front.oldest_peer_protocol = options.oldest_peer_protocol;
  return front;
}

storage::StoreOptions StoreOptionsFor(const DispatcherOptions& options) {
  storage::StoreOptions store;
  store.work_dir = options.work_dir;
  store.synchronous = options.synchronous;
  if (options.checkpoint_wal_frames > 0)
    store.checkpoint_wal_frames = options.checkpoint_wal_frames;
  // The loop writes each group commit; its fsync runs on the thread pool
  // (DurableState), so the loop serves on while the disk syncs.
  store.defer_sync = true;
  store.max_result_bytes = options.data.closures.max_result_bytes;
  if (options.max_record_bytes > 0) store.max_record_bytes = options.max_record_bytes;
  if (options.max_dataset_bytes > 0) store.max_dataset_bytes = options.max_dataset_bytes;
  return store;
}

void LogListening(const std::string& bound, const std::string& work_dir,
                  const std::string& http_url) {
  Log(LogLevel::kInfo, "dispatcher ", DISPATCH_VERSION, " listening on ", bound.c_str(),
      ", work dir ", work_dir.c_str(),
      http_url.empty() ? std::string(", HTTP off") : ", status page on " + http_url);
}

DispatcherServer::DispatcherServer(uvkj::UvAsyncIo& io, DispatcherOptions options)
    : DispatcherServer(io, std::move(options), ServingParts{}) {}

DispatcherServer::DispatcherServer(uvkj::UvAsyncIo& io, DispatcherOptions options,
                                   ServingParts parts)
    : io_(io),
      options_(std::move(options)),
      owned_front_(parts.front == nullptr
                       ? std::make_unique<Frontend>(io, FrontendOptionsFor(options_))
                       : nullptr),
      front_(parts.front != nullptr ? parts.front : owned_front_.get()),
      store_(std::move(parts.store)),
      live_(std::move(parts.live)),
      replicator_(parts.replicator),
      extra_metrics_(std::move(parts.extra_metrics)),
      closure_watchdog_(options_.stuck_closure_warning_ms) {}

DispatcherServer::~DispatcherServer() noexcept(false) {
  // The front's routes, gate and tick refer to this server: nothing of it
  // is served from here on.
  if (front_->http() != nullptr) front_->http()->Stop();
  if (front_->gate() == this) front_->SetGate(nullptr);
  front_->SetTickHook(nullptr);
  shutdown_ = nullptr;
  io_.port().SetPassEndHook(nullptr);
  data_.reset();
  // The connections go before durable_ and this server (their
  // capabilities refer to both), whoever owns the front.
  if (owned_front_ != nullptr) {
    owned_front_.reset();
  } else {
    front_->rpc().ForgetAll();
  }
  durable_.reset();
  store_.reset();
}

Result<std::string> DispatcherServer::Start() {
  KJ_REQUIRE(owned_front_ != nullptr && store_ == nullptr, "Start() is single node's");
  auto store = storage::Store::Open(StoreOptionsFor(options_));
  if (!store.ok()) return store.status();
  store_ = std::move(store.value());
  DISPATCH_RETURN_IF_ERROR(Serve());
  Result<std::string> bound = front_->Bind();
  if (!bound.ok()) return bound;
  AddHttpRoutes();
  LogListening(*bound, options_.work_dir, front_->http_url());
  return bound;
}

Status DispatcherServer::Serve() {
  KJ_REQUIRE(store_ != nullptr && durable_ == nullptr, "Serve() once, with a store");
  const bool took_live = live_ != nullptr;
  auto durable = DurableState::Recover(io_.loop(), *store_, options_.durable, std::move(live_));
  if (!durable.ok()) return durable.status();
  durable_ = std::move(durable.value());
  if (replicator_ != nullptr) durable_->SetReplicator(replicator_);
  durable_->pipeline().SetFatalHandler(
      [this](const Status& status) { StopOnStorageFailure(status); });
  durable_->pipeline().AddAppliedObserver([this](const state::Effects& effects) {
    closure_timings_.Observe(effects, durable_->pipeline().clock().MonotonicNanos());
    closure_watchdog_.OnApplied(effects);
  });
  // Every loop pass ends with the group commit and what must follow it
  // (DurableState::EndOfPass lists the steps).
  io_.port().SetPassEndHook([this]() { durable_->EndOfPass(); });
  const RecoveryStats& recovered = durable_->recovery();
  if (took_live) {
    Log(LogLevel::kInfo, "took the standby's live state over (last sequence number ",
        store_->last_seq(), ") in ", recovered.recovery_micros / 1000, " ms: nothing to replay");
  } else {
    Log(LogLevel::kInfo, "recovered state: snapshot at ", store_->snapshot_seq(), " + ",
        recovered.replayed, " journal records in ", recovered.recovery_micros / 1000,
        " ms (last sequence number ", store_->last_seq(), ")");
  }
  data_ =
      std::make_unique<DataService>(io_.loop(), *durable_, options_.data, front_->incarnation());
  DISPATCH_RETURN_IF_ERROR(data_->Start());
  front_->SetGate(this);
  front_->SetTickHook([this]() { Tick(); });
  // Single node binds the front after this; its routes go in then.
  if (owned_front_ == nullptr) AddHttpRoutes();
  return Status::Ok();
}

rpc::Dispatcher::Client DispatcherServer::Admit(RpcServer::ConnectionId id) {
  return kj::heap<DispatcherService>(*this, id);
}

void DispatcherServer::OnDisconnect(RpcServer::ConnectionId id) {
  if (data_ != nullptr && !shutting_down_) data_->workers().OnDisconnect(id);
}

void DispatcherServer::StopAtOnce(const Status& why, int exit_code) {
  if (exit_code_ != 0) return;
  if (durable_ != nullptr && !durable_->pipeline().failed()) {
    // Fails every parked reply; its fatal handler stops the server.
    stop_exit_code_ = exit_code;
    durable_->ReplicationFailed(why);
    return;
  }
  StopServing(exit_code, why);
}

void DispatcherServer::AddHttpRoutes() {
  HttpEndpoints* http = front_->http();
  if (http == nullptr) return;
  http->AddRoute("/readyz", [this]() -> kj::Promise<HttpReply> {
    std::string why;
    if (Ready(&why)) return HttpReply{200, "text/plain; charset=utf-8", "ready\n"};
    return HttpReply{503, "text/plain; charset=utf-8", "not ready: " + why + "\n"};
  });
  // The loop copies the figures; the thread pool formats them.
  http->AddRoute("/metrics", [this]() -> kj::Promise<HttpReply> {
    auto families = std::make_shared<std::vector<prometheus::MetricFamily>>(CollectMetrics(*this));
    return front_->off_loop()
        ->Run([families]() { return SerializeMetrics(*families); })
        .then([](std::string text) {
          return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8", std::move(text)};
        });
  });
  http->AddRoute("/api/status", [this]() -> kj::Promise<HttpReply> {
    auto doc = std::make_shared<Json>(CollectStatus(*this));
    return front_->off_loop()->Run([doc]() { return doc->Encode(); }).then([](std::string text) {
      return HttpReply{200, "application/json", std::move(text)};
    });
  });
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

bool DispatcherServer::Ready(std::string* why) const {
  if (shutting_down_) {
    *why = "shutting down";
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
  // A stop at once (StopAtOnce: the replicator's owner) has its own.
  StopServing(stop_exit_code_ != 0 ? stop_exit_code_
              : store_->failed()   ? kExitStorageFailure
                                   : kExitInternalError,
              status);
}

void DispatcherServer::StopServing(int exit_code, const Status& status) {
  exit_code_ = exit_code;
  Log(LogLevel::kError, "exiting with code ", exit_code_, ": ", status.ToString().c_str());
  shutting_down_ = true;
  front_->rpc().StopAccepting();
  front_->Close();
  if (data_ != nullptr) data_->StopTimers();
  // The pass-end hook stays: we may be running inside it, and a failed
  // DurableState commits nothing more.
  io_.Stop();
}

void DispatcherServer::Tick() {
  const uint64_t lateness_us = front_->tick().last_lateness_us();
  lag_since_sample_us_ = std::max(lag_since_sample_us_, lateness_us);
  if (uv_now(io_.loop()) >= next_sample_ms_) SampleHistory();
  if (durable_ != nullptr && data_ != nullptr && !shutting_down_) {
    const Clock& clock = durable_->pipeline().clock();
    closure_watchdog_.Check(durable_->state(), durable_->pipeline().NowMicros(), closure_timings_,
                            clock.MonotonicNanos());
  }
}

void DispatcherServer::FillVersion(rpc::Version::Builder version) const {
  version.setProtocol(kProtocolVersion);
  version.setBuild(DISPATCH_VERSION);
  version.setIncarnation(front_->incarnation());
}

void DispatcherServer::FillStats(rpc::ServerStats::Builder stats) const {
  const RpcServer& rpc = front_->rpc();
  const uvkj::UvRepeatingTimer& tick = front_->tick();
  const LoopPassMeter& loop_passes = front_->loop_passes();
  const ServerCounters& c = rpc.counters();
  stats.setUptimeMicros(uptime_micros());
  stats.setConnectionsOpen(rpc.connection_count());
  stats.setConnectionsAccepted(c.connections_accepted);
  stats.setCallsTotal(c.calls_total);
  stats.setCallsInFlight(c.calls_in_flight);
  stats.setRefusedOverConnectionLimit(c.refused_over_connection_limit);
  stats.setClosedHandshakeTimeout(c.closed_handshake_timeout);
  stats.setClosedOutboundBytes(c.closed_outbound_bytes);
  stats.setClosedCallsInFlight(c.closed_calls_in_flight);
  stats.setAuthenticationFailures(c.authentication_failures);
  stats.setTicks(tick.ticks());
  stats.setTickIntervalMicros(tick.interval_ms() * 1000);
  stats.setMaxTickLatenessMicros(tick.max_lateness_us());
  stats.setLoopPasses(loop_passes.passes());
  stats.setMaxLoopPassMicros(loop_passes.max_busy_ns() / 1000);
  stats.setLoopPassesOver10Ms(loop_passes.passes_over_10ms());
  stats.setLoopThreadId(front_->loop_thread().NumericId());
  stats.setCallbacksOffLoopThread(front_->loop_thread().violations());
  stats.setRefusedOverAddressLimit(c.refused_over_address_limit);
  stats.setClosedMessageTimeout(c.closed_message_timeout);
  stats.setClosedOversizedMessage(c.guard.oversized_messages);
  const PeerMemoryBudget& budget = rpc.peer_memory();
  stats.setPeerMemoryLimitBytes(budget.limit());
  stats.setPeerMemoryUsedBytes(budget.used());
  stats.setPeerMemoryHighWaterBytes(budget.counters().high_water_bytes);
  stats.setPeerMemoryQueuedReplyBytes(rpc.outbound_charged());
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
  const std::optional<uint64_t> deadline =
      front_->StartDrain(&shutting_down_, why, options_.drain_timeout_ms);
  if (!deadline) return;
  shutdown_ = DrainThenStop(*deadline).eagerlyEvaluate([this](kj::Exception&& e) {
    Log(LogLevel::kError, "shutdown failed: ", e.getDescription());
    io_.Stop();
  });
}

kj::Promise<void> DispatcherServer::DrainThenStop(uint64_t deadline_ms) {
  // A checkpoint or snapshot task on the thread pool must be over before the
  // Store closes: none starts from now on, a snapshot task is cancelled
  // (shutdown writes its own), and what still runs is awaited here, so that
  // destroying durable_ below never has work in flight.
  kj::Promise<void> background =
      durable_ != nullptr ? durable_->StopBackgroundWork() : kj::Promise<void>(kj::READY_NOW);
  return background.then([this, deadline_ms]() { return front_->DrainReplies(deadline_ms); })
      .then([this]() {
        if (data_ != nullptr) data_->StopTimers();
        front_->Close();
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

}  // namespace dispatch::reactor
