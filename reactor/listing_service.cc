// DispatcherService: the listings dispatchctl shows (workers, datasets, jobs,
// one job with its tasks and clients, tasks, job clients). Reads of the state
// plus the live facts only the reactor knows (connected, last heartbeat);
// like every reply they wait for the pass's commit.

#include "reactor/data_service.h"
#include "reactor/service_util.h"
#include "reactor/services.h"
#include "reactor/task_info.h"

namespace dispatch::reactor {
namespace {

// Active tasks (finished included), then pending ones, of one job.
std::vector<const state::Task*> AllTasksOfJob(const state::DispatcherState& state,
                                              uint64_t job_id) {
  std::vector<const state::Task*> tasks = state.TasksForJob(job_id);
  for (const state::PendingTask* pending : state.PendingTasks(job_id)) {
    if (const state::Task* task = state.FindTask(pending->task_id)) tasks.push_back(task);
  }
  return tasks;
}

void FillJobInfo(const state::DispatcherState& state, const state::Job& job,
                 rpc::JobInfo::Builder info) {
  info.setJobId(job.id);
  info.setDatasetId(job.dataset_id);
  if (job.named_key.has_value()) {
    info.setJobName(job.named_key->name);
    info.setJobNameIndex(job.named_key->index);
  }
  info.setProcessingMode(job.processing_mode);
  info.setNumConsumers(job.num_consumers);
  info.setTargetWorkers(job.target_workers);
  info.setNumClients(static_cast<uint32_t>(job.num_clients));
  info.setFinished(job.finished);
  info.setGarbageCollected(job.garbage_collected);
  info.setNumTasks(
      static_cast<uint32_t>(state.TasksForJob(job.id).size() + job.pending_tasks.size()));
}

void FillClientInfo(DataService& data, const state::JobClient& client,
                    rpc::JobClientInfo::Builder info) {
  info.setJobClientId(client.id);
  info.setJobId(client.job_id);
  int64_t last = data.soft().consumers.LastHeartbeatMicros(client.id);
  info.setLastHeartbeatMicros(last != 0 ? last : client.acquired_micros);
}

}  // namespace

kj::Promise<void> DispatcherService::getWorkers(GetWorkersContext context) {
  DataService& data = this->data();
  const auto& state = data.state();
  auto workers = state.ListWorkers();
  auto results = context.getResults();
  auto list = results.initWorkers(static_cast<unsigned>(workers.size()));
  for (size_t i = 0; i < workers.size(); ++i) {
    const state::Worker& worker = *workers[i];
    auto info = list[i];
    info.setWorkerId(worker.id);
    info.setAddress(worker.address);
    info.setTransferAddress(worker.transfer_address);
    auto tags = info.initTags(static_cast<unsigned>(worker.tags.size()));
    for (size_t t = 0; t < worker.tags.size(); ++t) tags.set(t, worker.tags[t]);
    info.setConnected(data.workers().IsConnected(worker.address));
    info.setNumTasks(static_cast<uint32_t>(state.TasksForWorker(worker.address).size()));
    info.setLastHeartbeatMicros(data.workers().LastHeartbeatMicros(worker.address));
    auto kinds = info.initDatasetKinds(static_cast<unsigned>(worker.dataset_kinds.size()));
    unsigned k = 0;
    for (const std::string& kind : worker.dataset_kinds) kinds.set(k++, kind);
  }
  results.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::listDatasets(ListDatasetsContext context) {
  DataService& data = this->data();
  auto datasets = data.state().ListDatasets();
  auto results = context.getResults();
  auto list = results.initDatasets(static_cast<unsigned>(datasets.size()));
  for (size_t i = 0; i < datasets.size(); ++i) {
    list[i].setDatasetId(datasets[i]->id);
    list[i].setFingerprint(datasets[i]->fingerprint);
    list[i].setHasElementSpec(datasets[i]->element_spec.has_value());
    auto source = data.datasets().SplitSource(datasets[i]->id);
    list[i].setNumSplits(source.ok() ? (*source)->num_splits : 0);
    list[i].setKind(datasets[i]->kind);
  }
  results.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::listJobs(ListJobsContext context) {
  DataService& data = this->data();
  auto jobs = data.state().ListJobs();
  auto results = context.getResults();
  auto list = results.initJobs(static_cast<unsigned>(jobs.size()));
  for (size_t i = 0; i < jobs.size(); ++i) FillJobInfo(data.state(), *jobs[i], list[i]);
  results.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::getJob(GetJobContext context) {
  DataService& data = this->data();
  const auto& state = data.state();
  const state::Job* job = ValueOrThrow(state.GetJob(context.getParams().getJobId()));
  auto results = context.getResults();
  FillJobInfo(state, *job, results.initJob());
  auto tasks = AllTasksOfJob(state, job->id);
  auto task_list = results.initTasks(static_cast<unsigned>(tasks.size()));
  for (size_t i = 0; i < tasks.size(); ++i)
    FillTaskInfo(state, data.options(), *tasks[i], task_list[i]);
  auto clients = state.ClientsForJob(job->id);
  auto client_list = results.initClients(static_cast<unsigned>(clients.size()));
  for (size_t i = 0; i < clients.size(); ++i) FillClientInfo(data, *clients[i], client_list[i]);
  results.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::listTasks(ListTasksContext context) {
  DataService& data = this->data();
  const auto& state = data.state();
  std::vector<const state::Task*> tasks;
  for (const state::Job* job : state.ListJobs()) {
    auto of_job = AllTasksOfJob(state, job->id);
    tasks.insert(tasks.end(), of_job.begin(), of_job.end());
  }
  auto results = context.getResults();
  auto list = results.initTasks(static_cast<unsigned>(tasks.size()));
  for (size_t i = 0; i < tasks.size(); ++i) FillTaskInfo(state, data.options(), *tasks[i], list[i]);
  results.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::listJobClients(ListJobClientsContext context) {
  DataService& data = this->data();
  auto clients = data.state().ListJobClients();
  auto results = context.getResults();
  auto list = results.initClients(static_cast<unsigned>(clients.size()));
  for (size_t i = 0; i < clients.size(); ++i) FillClientInfo(data, *clients[i], list[i]);
  results.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

}  // namespace dispatch::reactor
