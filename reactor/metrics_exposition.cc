#include "reactor/metrics_exposition.h"

#include <stdio.h>
#include <unistd.h>

#include <limits>
#include <map>
#include <sstream>
#include <vector>

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include "reactor/dispatcher_server.h"
#include "state/task_routing.h"

#ifndef DISPATCH_VERSION
#define DISPATCH_VERSION "dev"
#endif

namespace dispatch::reactor {
namespace {

using prometheus::MetricFamily;
using Labels = MetricFamilies::Labels;

}  // namespace

uint64_t ResidentBytes() {
  FILE* f = fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  int n = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

std::string SerializeMetrics(const std::vector<MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

namespace {

// Process, RPC calls, connections and limits.
void AddFront(MetricFamilies& f, Frontend& front) {
  f.Gauge("dispatch_build_info",
          "Always 1; the labels name the build and this process's incarnation.", 1,
          {{"version", DISPATCH_VERSION}, {"incarnation", std::to_string(front.incarnation())}});
  f.Gauge("dispatch_uptime_seconds", "Seconds since this dispatcher process started.",
          static_cast<double>(front.uptime_micros()) * 1e-6);
  f.Gauge("process_resident_memory_bytes", "Resident set size of the dispatcher process.",
          static_cast<double>(ResidentBytes()));

  // RPC: calls, errors and latency per method.
  for (const RpcMetrics::Method& m : front.rpc_metrics().methods()) {
    if (m.calls == 0) continue;
    Labels labels = {{"interface", m.interface_name}, {"method", m.method_name}};
    f.Counter("dispatch_rpc_calls_total", "RPC calls answered (failed ones included), by method.",
              static_cast<double>(m.calls), labels);
  }
  for (const RpcMetrics::Method& m : front.rpc_metrics().methods()) {
    for (size_t code = 1; code < RpcMetrics::kNumCodes; ++code) {
      if (m.errors[code] == 0) continue;
      f.Counter("dispatch_rpc_errors_total", "RPC calls that failed, by method and error code.",
                static_cast<double>(m.errors[code]),
                {{"interface", m.interface_name},
                 {"method", m.method_name},
                 {"code", StatusCodeName(static_cast<StatusCode>(code))}});
    }
  }
  for (const RpcMetrics::Method& m : front.rpc_metrics().methods()) {
    if (m.calls == 0) continue;
    f.Histo("dispatch_rpc_latency_seconds",
            "From a call's arrival to its reply (the group commit included), by method.", m.latency,
            {{"interface", m.interface_name}, {"method", m.method_name}});
  }

  // Connections and limits.
  RpcServer& rpc = front.rpc();
  const ServerCounters& c = rpc.counters();
  f.Gauge("dispatch_connections_open", "Open RPC connections.", static_cast<double>(rpc.connection_count()));
  f.Counter("dispatch_connections_accepted_total", "RPC connections accepted.",
            static_cast<double>(c.connections_accepted));
  f.Gauge("dispatch_rpc_calls_in_flight", "RPC calls being handled or waiting for their commit.",
          static_cast<double>(c.calls_in_flight));
  f.Counter("dispatch_authentication_failures_total", "Gateway.authenticate calls with a wrong token.",
            static_cast<double>(c.authentication_failures));
  const char* kLimitHelp = "Connections refused or closed for crossing a limit, by limit.";
  const std::pair<const char*, uint64_t> limits[] = {
      {"max_connections", c.refused_over_connection_limit},
      {"max_connections_per_address", c.refused_over_address_limit},
      {"handshake_timeout", c.closed_handshake_timeout},
      {"max_outbound_bytes", c.closed_outbound_bytes},
      {"max_calls_in_flight", c.closed_calls_in_flight},
      {"message_timeout", c.closed_message_timeout},
      {"max_message_bytes", c.guard.oversized_messages},
      {"peer_memory_budget_message", c.guard.budget_refusals},
      {"peer_memory_budget_replies", c.closed_outbound_over_budget},
  };
  for (const auto& [limit, count] : limits) {
    f.Counter("dispatch_limit_crossings_total", kLimitHelp, static_cast<double>(count), {{"limit", limit}});
  }
  const PeerMemoryBudget& budget = rpc.peer_memory();
  f.Gauge("dispatch_peer_memory_used_bytes",
          "Bytes held for peers now: half-received messages and queued replies.",
          static_cast<double>(budget.used()));
  f.Gauge("dispatch_peer_memory_queued_reply_bytes", "Of the bytes held for peers, queued replies.",
          static_cast<double>(rpc.outbound_charged()));
  f.Gauge("dispatch_peer_memory_limit_bytes", "The peer memory budget (--peer-memory-budget-bytes).",
          static_cast<double>(budget.limit()));
  f.Gauge("dispatch_peer_memory_high_water_bytes", "Most bytes held for peers at once.",
          static_cast<double>(budget.counters().high_water_bytes));
  f.Counter("dispatch_peer_memory_waits_total", "Messages whose body waited for the peer memory budget.",
            static_cast<double>(c.guard.budget_waits));
}

// The journal: commits, fsyncs, snapshots, checkpoints, recovery.
void AddJournal(MetricFamilies& f, const DurableState& durable) {
  // The journal.
  const CommitPipeline& pipeline = durable.pipeline();
  const CompactionStats& cs = durable.compaction().stats();
  static const SyncStats kNoSyncs;
  static const Histogram kNoSyncSeconds{Histogram::SecondsBounds()};
  const SyncStage* sync = durable.sync_stage();
  f.Counter("dispatch_journal_commits_total", "Group commits (SQLite transactions) written.",
            static_cast<double>(pipeline.stats().commits));
  f.Counter("dispatch_journal_records_total", "Updates journaled.", static_cast<double>(pipeline.stats().records));
  f.Histo("dispatch_journal_commit_seconds",
          "Duration of writing one group commit on the loop (its fsync, on the thread pool, is "
          "dispatch_journal_sync_seconds).",
          pipeline.commit_seconds());
  f.Histo("dispatch_journal_sync_seconds",
          "Duration of one WAL fsync (on the thread pool, the hand-off included, or on the "
          "loop); replies of the commits it covers wait for it.",
          sync != nullptr ? sync->sync_seconds() : kNoSyncSeconds);
  f.Counter("dispatch_journal_inline_syncs_total",
            "WAL fsyncs run on the loop thread right after a small commit "
            "(--inline-sync-records); the others ran on the thread pool.",
            static_cast<double>((sync != nullptr ? sync->stats() : kNoSyncs).inline_syncs));
  f.Histo("dispatch_journal_records_per_commit", "Updates in one group commit.", pipeline.records_per_commit());
  f.Counter("dispatch_snapshots_total", "Snapshots recorded.", static_cast<double>(cs.snapshots));
  f.Counter("dispatch_snapshot_failures_total", "Snapshot attempts that recorded nothing.",
            static_cast<double>(cs.snapshot_failures));
  f.Histo("dispatch_snapshot_seconds", "Duration of a snapshot, start to recorded.", durable.compaction().snapshot_seconds());
  f.Counter("dispatch_checkpoints_total", "WAL checkpoints done.", static_cast<double>(cs.checkpoints));
  f.Histo("dispatch_checkpoint_seconds", "Duration of a WAL checkpoint on the thread pool.",
          durable.compaction().checkpoint_seconds());
  const std::string restarts_help =
      "WAL restarts after a complete checkpoint, by thread: pool (the checkpointer's one write, "
      "commits held meanwhile) or loop (a commit restarted it and synced the new WAL header on "
      "the loop thread; only after rare races).";
  f.Counter("dispatch_wal_restarts_total", restarts_help, static_cast<double>(cs.wal_restarts_off_loop),
            {{"thread", "pool"}});
  f.Counter("dispatch_wal_restarts_total", restarts_help, static_cast<double>(durable.store().wal_restarts_on_loop()),
            {{"thread", "loop"}});
  const std::string backups_help =
      "Backups of the work dir (dispatchctl backup) by outcome: completed, or failed after "
      "they were accepted (what they wrote removed).";
  const BackupStats& bs = durable.backup().stats();
  f.Counter("dispatch_backups_total", backups_help, static_cast<double>(bs.completed),
            {{"outcome", "completed"}});
  f.Counter("dispatch_backups_total", backups_help, static_cast<double>(bs.failed),
            {{"outcome", "failed"}});
  f.Gauge("dispatch_recovery_seconds", "Time the last start-up took to load the snapshot and replay.",
          static_cast<double>(durable.recovery().recovery_micros) * 1e-6);
}

void AddLoop(MetricFamilies& f, const Frontend& front) {
  // The loop.
  f.Histo("dispatch_loop_lag_seconds",
          "How late the housekeeping timer (--tick-ms) fired: time the loop was busy elsewhere.",
          front.loop_lag());
  f.Gauge("dispatch_loop_lag_max_seconds", "The largest lateness of the housekeeping timer so far.",
          static_cast<double>(front.tick().max_lateness_us()) * 1e-6);
  f.Histo(
      "dispatch_loop_pass_busy_seconds",
      "How long each pass of the event loop kept it busy (its wall time less its wait for I/O).",
      front.loop_passes().busy_seconds());
  f.Gauge("dispatch_loop_pass_busy_max_seconds", "The longest busy loop pass so far.",
          static_cast<double>(front.loop_passes().max_busy_ns()) * 1e-9);
}

// The state and its services.
void AddServices(MetricFamilies& f, DispatcherServer& server, DataService* data) {
  // The state and its services.
  const state::DispatcherState& st = data->state();
  const WorkerRegistryStats& ws = data->workers().stats();
  f.Gauge("dispatch_workers", "Registered workers.", static_cast<double>(st.NumWorkers()));
  f.Counter("dispatch_workers_removed_total", "Workers removed, by reason.",
            static_cast<double>(ws.removed_disconnected), {{"reason", "disconnected"}});
  f.Counter("dispatch_workers_removed_total", "Workers removed, by reason.",
            static_cast<double>(ws.removed_timed_out), {{"reason", "timed_out"}});
  f.Counter("dispatch_worker_heartbeats_total", "Heartbeats of registered workers.",
            static_cast<double>(ws.heartbeats));
  f.Counter("dispatch_task_pushes_failed_total", "startTasks/deleteTasks pushes that failed.",
            static_cast<double>(ws.pushes_failed));
  f.Gauge("dispatch_datasets", "Registered datasets.", static_cast<double>(st.NumDatasets()));
  f.Gauge("dispatch_jobs", "Jobs, by whether they finished.",
          static_cast<double>(st.NumUnfinishedJobs()), {{"state", "unfinished"}});
  f.Gauge("dispatch_jobs", "Jobs, by whether they finished.",
          static_cast<double>(st.NumJobs() - st.NumUnfinishedJobs()), {{"state", "finished"}});
  f.Gauge(
      "dispatch_jobs_without_worker",
      "Unfinished jobs no registered worker can produce (their dataset kind is announced by none).",
      static_cast<double>(state::JobsWithoutWorker(st)));
  f.Gauge("dispatch_tasks", "Tasks (active, pending and finished).",
          static_cast<double>(st.NumTasks()));
  f.Gauge("dispatch_job_clients", "Job clients (consumers) holding a job.",
          static_cast<double>(st.NumJobClients()));
  const DataServiceStats& dss = data->stats();
  f.Counter("dispatch_jobs_garbage_collected_total", "Jobs garbage-collected.",
            static_cast<double>(dss.jobs_garbage_collected));
  f.Counter("dispatch_job_clients_timed_out_total", "Job clients released for missing heartbeats.",
            static_cast<double>(dss.clients_timed_out));
  f.Counter("dispatch_splits_handed_out_total",
            "Splits handed out by getSplit (repeated answers not counted).",
            static_cast<double>(dss.splits_handed_out));
  f.Counter("dispatch_tasks_handed_over_total",
            "Tasks finished for a worker gone past --worker-grace-ms (HandOverTask).",
            static_cast<double>(dss.tasks_handed_over));

  ClosureDispatcher& closures = data->closures();
  const char* kStateHelp = "Closures the dispatcher holds, by state.";
  const std::pair<const char*, state::ClosureState> states[] = {
      {"waiting", state::ClosureState::WAITING},   {"queued", state::ClosureState::QUEUED},
      {"assigned", state::ClosureState::ASSIGNED}, {"finished", state::ClosureState::FINISHED},
      {"failed", state::ClosureState::FAILED},     {"cancelled", state::ClosureState::CANCELLED},
  };
  for (const auto& [name, s] : states) {
    f.Gauge("dispatch_closures", kStateHelp, static_cast<double>(st.NumClosuresInState(s)),
            {{"state", name}});
  }
  const ClosureCounters& cc = closures.counters();
  const std::tuple<const char*, const char*, uint64_t> counters[] = {
      {"dispatch_closures_scheduled_total", "Closures scheduled.", cc.scheduled},
      {"dispatch_closure_results_accepted_total", "Closure outcomes accepted from workers.",
       cc.results_accepted},
      {"dispatch_closure_reports_ignored_total",
       "Closure reports ignored (duplicate, stale or late).", cc.reports_ignored},
      {"dispatch_closure_put_backs_total",
       "Closures returned to the queue after their worker failed.", cc.put_back},
      {"dispatch_closure_transient_retries_total", "Closures retried after a transient error.",
       cc.transient_retries},
      {"dispatch_closure_attempts_exhausted_total",
       "Closures failed after --max-closure-attempts runs.", cc.attempts_exhausted},
      {"dispatch_closures_released_total", "Closure outcomes released (fetched or dropped).",
       cc.released},
      {"dispatch_closure_pushes_failed_total", "runClosures pushes that failed.", cc.pushes_failed},
      {"dispatch_closure_schedule_waits_total", "schedule calls that waited for queue room.",
       cc.schedule_waits},
      {"dispatch_closure_cancels_total", "Closures cancelled by Coordinator.cancel.",
       cc.cancel_requested},
      {"dispatch_closure_deadlines_exceeded_total", "Closures failed by their timeout.",
       cc.deadlines_exceeded},
  };
  for (const auto& [name, help, value] : counters)
    f.Counter(name, help, static_cast<double>(value));
  const ClosureTimings& timings = server.closure_timings();
  f.Histo(
      "dispatch_closure_queue_wait_seconds",
      "From a closure's schedule (or put-back) to its assignment (the reference's queued_closure).",
      timings.queue_wait());
  f.Histo(
      "dispatch_closure_execution_seconds",
      "From a closure's assignment to its worker's outcome (the reference's closure_execution).",
      timings.execution());
  f.Counter("dispatch_closure_timings_untracked_total",
            "Closures not timed: over the bound of closures timed at once.",
            static_cast<double>(timings.untracked()));
  const ClosureWatchdog& watchdog = server.closure_watchdog();
  f.Counter("dispatch_closure_stuck_episodes_total",
            "Times closures were running and none finished for --stuck-closure-warning-ms "
            "(each logged once as a warning).",
            static_cast<double>(watchdog.episodes()));
  f.Gauge("dispatch_closures_stuck",
          "Closures running in the current stuck episode; 0 when none is on.",
          static_cast<double>(watchdog.stuck_closures()));
  // Not here: closures no connected worker can run (getServerStats has
  // it), which takes time in proportion to the workers to count.
}

void AddHttp(MetricFamilies& f, const Frontend& front) {
  // HTTP itself.
  if (const HttpEndpoints* http = front.http()) {
    const HttpCounters& h = http->counters();
    f.Counter("dispatch_http_requests_total", "HTTP requests served (any status).",
              static_cast<double>(h.requests));
    f.Counter("dispatch_http_unauthorized_total", "HTTP requests refused for a missing or wrong token.",
              static_cast<double>(h.unauthorized));
    f.Gauge("dispatch_http_connections_open", "Open HTTP connections.",
            static_cast<double>(http->connections_open()));
    f.Counter("dispatch_http_connections_refused_total", "HTTP connections closed at once: over the limit.",
              static_cast<double>(h.connections_refused));
    for (const auto& [path, histogram] : http->RenderTimes()) {
      f.Histo("dispatch_http_render_seconds",
              "Time an HTTP route took to build its reply on the loop thread (the loop's cost of a scrape).",
              *histogram, {{"path", path}});
    }
  }
}

}  // namespace

std::vector<MetricFamily> CollectMetrics(DispatcherServer& server) {
  MetricFamilies f;
  AddFront(f, server.front());
  if (const DurableState* durable = server.durable_if_open()) AddJournal(f, *durable);
  if (server.extra_metrics()) server.extra_metrics()(f);
  AddLoop(f, server.front());
  if (DataService* data = server.data()) AddServices(f, server, data);
  AddHttp(f, server.front());
  return f.Release();
}

std::vector<MetricFamily> CollectFrontMetrics(Frontend& front, const MetricsExtra& extra) {
  MetricFamilies f;
  AddFront(f, front);
  if (extra) extra(f);
  AddLoop(f, front);
  AddHttp(f, front);
  return f.Release();
}

}  // namespace dispatch::reactor
