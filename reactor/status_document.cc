#include "reactor/status_document.h"

#include <algorithm>

#include "reactor/dispatcher_server.h"
#include "reactor/json_tree.h"
#include "reactor/metrics_exposition.h"

#ifndef DISPATCH_VERSION
#define DISPATCH_VERSION "dev"
#endif

namespace dispatch::reactor {
namespace {

const std::pair<const char*, state::ClosureState> kStates[] = {
    {"waiting", state::ClosureState::WAITING},   {"queued", state::ClosureState::QUEUED},
    {"assigned", state::ClosureState::ASSIGNED}, {"finished", state::ClosureState::FINISHED},
    {"failed", state::ClosureState::FAILED},     {"cancelled", state::ClosureState::CANCELLED},
};

Json Workers(DataService& data, int64_t now_micros) {
  const state::DispatcherState& st = data.state();
  Json list = Json::MakeArray();
  for (const state::Worker* worker : st.ListWorkers(kMaxWorkersListed)) {
    Json w = Json::MakeObject();
    w.Set("id", worker->id);
    w.Set("address", worker->address);
    w.Set("transferAddress", worker->transfer_address);
    w.Set("connected", data.workers().IsConnected(worker->address));
    const int64_t last = data.workers().LastHeartbeatMicros(worker->address);
    w.Set("lastHeartbeatMicros", last);
    w.Set("secondsSinceHeartbeat", last == 0 ? Json() : Json(static_cast<double>(now_micros - last) * 1e-6));
    w.Set("tasks", static_cast<uint64_t>(st.TasksForWorker(worker->address).size()));
    w.Set("closureSlots", data.closures().SlotsOf(worker->id));
    w.Set("runningClosures", static_cast<uint64_t>(st.NumClosuresOnWorker(worker->id)));
    list.Push(std::move(w));
  }
  return list;
}

Json Jobs(const state::DispatcherState& st) {
  Json list = Json::MakeArray();
  size_t shown = 0;
  // ListJobs is O(jobs); jobs are few next to workers (each one is a dataset
  // read by consumers), so this stays.
  for (const state::Job* job : st.ListJobs()) {
    if (shown++ >= kMaxJobsListed) break;
    Json j = Json::MakeObject();
    j.Set("id", job->id);
    j.Set("datasetId", job->dataset_id);
    j.Set("name", job->named_key ? job->named_key->name : std::string());
    j.Set("processingMode", state::ProcessingModeName(job->processing_mode));
    j.Set("finished", job->finished);
    j.Set("garbageCollected", job->garbage_collected);
    j.Set("consumers", job->num_clients);
    Json tasks = Json::MakeArray();
    std::vector<const state::Task*> job_tasks = st.TasksForJob(job->id);
    for (size_t i = 0; i < job_tasks.size() && i < kMaxTasksPerJob; ++i) {
      Json t = Json::MakeObject();
      t.Set("id", job_tasks[i]->id);
      t.Set("worker", job_tasks[i]->worker_address);
      t.Set("finished", job_tasks[i]->finished);
      tasks.Push(std::move(t));
    }
    j.Set("tasksTotal", static_cast<uint64_t>(job_tasks.size()));
    j.Set("tasks", std::move(tasks));
    list.Push(std::move(j));
  }
  return list;
}

Json Coordinators(const state::DispatcherState& st) {
  Json list = Json::MakeArray();
  for (uint64_t id : st.CoordinatorIds(kMaxCoordinatorsListed)) {
    std::map<state::ClosureState, uint64_t> by_state;
    for (const state::Closure* closure : st.ClosuresForCoordinator(id)) ++by_state[closure->state];
    Json c = Json::MakeObject();
    c.Set("id", std::to_string(id));  // 64-bit ids do not fit a JSON number
    for (const auto& [name, s] : kStates) c.Set(name, by_state[s]);
    list.Push(std::move(c));
  }
  return list;
}

Json History(const StatusHistory& history) {
  Json h = Json::MakeObject();
  Json t = Json::MakeArray(), finished = Json::MakeArray(), heartbeats = Json::MakeArray(),
       p50 = Json::MakeArray(), p99 = Json::MakeArray(), commits = Json::MakeArray(), lag = Json::MakeArray();
  for (const StatusSample& s : history.Samples()) {
    t.Push(s.unix_seconds);
    finished.Push(s.closures_finished_per_second);
    heartbeats.Push(s.heartbeats_per_second);
    p50.Push(s.commit_p50_ms);
    p99.Push(s.commit_p99_ms);
    commits.Push(s.commits_per_second);
    lag.Push(s.loop_lag_ms);
  }
  h.Set("intervalSeconds", 1);
  h.Set("capacity", static_cast<uint64_t>(StatusHistory::kCapacity));
  h.Set("unixSeconds", std::move(t));
  h.Set("closuresFinishedPerSecond", std::move(finished));
  h.Set("heartbeatsPerSecond", std::move(heartbeats));
  h.Set("commitP50Ms", std::move(p50));
  h.Set("commitP99Ms", std::move(p99));
  h.Set("commitsPerSecond", std::move(commits));
  h.Set("loopLagMs", std::move(lag));
  return h;
}

}  // namespace

Json CollectFrontStatus(Frontend& front, bool ready, const std::string& not_ready_because) {
  Json doc = Json::MakeObject();
  doc.Set("version", DISPATCH_VERSION);
  doc.Set("incarnation", std::to_string(front.incarnation()));  // 64 bits: a string
  doc.Set("uptimeSeconds", static_cast<double>(front.uptime_micros()) * 1e-6);
  doc.Set("ready", ready);
  doc.Set("notReadyBecause", not_ready_because);
  doc.Set("residentBytes", ResidentBytes());
  doc.Set("connectionsOpen", static_cast<uint64_t>(front.rpc().connection_count()));
  doc.Set("rpcCallsTotal", front.rpc().counters().calls_total);
  return doc;
}

Json CollectStatus(DispatcherServer& server) {
  std::string why;
  const bool ready = server.Ready(&why);
  Json doc = CollectFrontStatus(server.front(), ready, why);
  DataService* data = server.data();
  if (data == nullptr) return doc;
  const state::DispatcherState& st = data->state();
  if (server.durable_if_open() == nullptr) return doc;
  const int64_t now_micros = server.durable_if_open()->pipeline().NowMicros();
  doc.Set("workersTotal", static_cast<uint64_t>(st.NumWorkers()));
  doc.Set("workers", Workers(*data, now_micros));
  doc.Set("jobsTotal", static_cast<uint64_t>(st.NumJobs()));
  doc.Set("jobs", Jobs(st));
  Json closures = Json::MakeObject();
  for (const auto& [name, s] : kStates) closures.Set(name, static_cast<uint64_t>(st.NumClosuresInState(s)));
  doc.Set("closures", std::move(closures));
  doc.Set("closuresStuck", server.closure_watchdog().stuck_closures());
  doc.Set("stuckEpisodes", server.closure_watchdog().episodes());
  doc.Set("coordinatorsTotal", static_cast<uint64_t>(st.NumCoordinators()));
  doc.Set("coordinators", Coordinators(st));
  doc.Set("history", History(server.history()));
  return doc;
}

}  // namespace dispatch::reactor
