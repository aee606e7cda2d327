#include "tests/dataservice/ds_test_util.h"

#include <cstdio>
#include <cstdlib>
#include <random>

namespace dispatch::testing {
namespace {

capnp::Data::Reader AsData(const std::string& bytes) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size());
}

std::string ToString(capnp::Data::Reader data) {
  return std::string(reinterpret_cast<const char*>(data.begin()), data.size());
}

class RecordingControl final : public rpc::WorkerControl::Server {
 public:
  explicit RecordingControl(std::shared_ptr<PushLog> log) : log_(std::move(log)) {}

  kj::Promise<void> startTasks(StartTasksContext context) override {
    if (log_->fail_next_starts > 0) {
      --log_->fail_next_starts;
      ++log_->failed_starts;
      return KJ_EXCEPTION(DISCONNECTED, "simulated worker cannot take tasks now");
    }
    for (auto info : context.getParams().getTasks()) log_->started.push_back(ToView(info));
    if (log_->hold_starts) {
      ++log_->held_starts;
      return kj::NEVER_DONE;
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> deleteTasks(DeleteTasksContext context) override {
    for (uint64_t id : context.getParams().getTaskIds()) log_->deleted.push_back(id);
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<PushLog> log_;
};

}  // namespace

uint64_t TestSeed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("DISPATCH_TEST_SEED");
    uint64_t value = env != nullptr ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("DISPATCH_TEST_SEED=%llu\n", static_cast<unsigned long long>(value));
    std::fflush(stdout);
    return value;
  }();
  return seed;
}

SplitView ToView(rpc::SplitResponse::Reader response) {
  SplitView view;
  for (auto split : response.getSplits()) {
    view.indices.push_back(split.getIndex());
    view.payloads.push_back(ToString(split.getPayload()));
  }
  view.end_of_splits = response.getEndOfSplits();
  view.repetition = response.getRepetition();
  view.incarnation = response.getIncarnation();
  return view;
}

DsClient::DsClient(ClientLoop& loop, const std::string& address)
    : loop_(loop), conn_(loop.Connect(address)) {}

uint64_t DsClient::Incarnation() {
  return loop_.Wait(dispatcher().getVersionRequest().send()).getVersion().getIncarnation();
}

Result<uint64_t> DsClient::RegisterDataset(const DatasetSpec& spec) {
  auto request = dispatcher().getOrRegisterDatasetRequest();
  request.setDefinition(AsData(spec.definition));
  if (spec.indexed_splits.has_value()) {
    request.initSplitSource().setIndexed(*spec.indexed_splits);
  } else if (!spec.explicit_splits.empty()) {
    auto list =
        request.initSplitSource().initExplicit(static_cast<unsigned>(spec.explicit_splits.size()));
    for (size_t i = 0; i < spec.explicit_splits.size(); ++i)
      list.set(i, AsData(spec.explicit_splits[i]));
  }
  request.setElementSpec(AsData(spec.element_spec));
  request.setMetadata(AsData(spec.metadata));
  return Try(loop_, request.send().then([](auto response) { return response.getDatasetId(); }));
}

Result<DatasetDefView> DsClient::GetDatasetDef(uint64_t dataset_id) {
  auto request = dispatcher().getDatasetDefRequest();
  request.setDatasetId(dataset_id);
  return Try(loop_, request.send().then([](auto response) {
    DatasetDefView view;
    view.definition = ToString(response.getDefinition());
    auto source = response.getSplitSource();
    view.split_kind = source.which();
    if (source.isIndexed()) view.num_indexed = source.getIndexed();
    if (source.isExplicit()) {
      for (auto payload : source.getExplicit()) view.payloads.push_back(ToString(payload));
    }
    view.metadata = ToString(response.getMetadata());
    view.incarnation = response.getIncarnation();
    return view;
  }));
}

Result<std::string> DsClient::GetElementSpec(uint64_t dataset_id) {
  auto request = dispatcher().getElementSpecRequest();
  request.setDatasetId(dataset_id);
  return Try(loop_, request.send().then(
                        [](auto response) { return ToString(response.getElementSpec()); }));
}

Result<JobIds> DsClient::GetOrCreateJob(const JobSpec& spec) {
  auto request = dispatcher().getOrCreateJobRequest();
  auto job = request.initRequest();
  job.setDatasetId(spec.dataset_id);
  job.setProcessingMode(spec.mode);
  job.setJobName(spec.name);
  job.setJobNameIndex(spec.name_index);
  job.setNumConsumers(spec.num_consumers);
  job.setTargetWorkers(spec.target);
  job.setRequeueUnfinishedSplits(spec.requeue_unfinished_splits);
  return Try(loop_, request.send().then([](auto response) {
    return JobIds{response.getJobId(), response.getJobClientId(), response.getIncarnation()};
  }));
}

Result<ClientHeartbeatView> DsClient::ClientHeartbeat(uint64_t job_client_id, int64_t current_round,
                                                      int64_t blocked_round,
                                                      uint64_t known_version) {
  auto request = dispatcher().clientHeartbeatRequest();
  auto body = request.initRequest();
  body.setJobClientId(job_client_id);
  body.setCurrentRound(current_round);
  body.setBlockedRound(blocked_round);
  body.setKnownTaskListVersion(known_version);
  return Try(loop_, request.send().then([](auto response) {
    auto r = response.getResponse();
    ClientHeartbeatView view;
    view.version = r.getTaskListVersion();
    view.changed = r.getTaskListChanged();
    for (auto task : r.getTasks()) view.tasks.push_back(ToView(task));
    view.job_finished = r.getJobFinished();
    view.block_round = r.getBlockRound();
    view.incarnation = r.getIncarnation();
    return view;
  }));
}

Status DsClient::ReleaseJobClient(uint64_t job_client_id) {
  auto request = dispatcher().releaseJobClientRequest();
  request.setJobClientId(job_client_id);
  return Try(loop_, request.send().then([](auto) { return true; })).status();
}

Result<bool> DsClient::MaybeRemoveTask(uint64_t task_id, uint32_t consumer_index, int64_t round) {
  auto request = dispatcher().maybeRemoveTaskRequest();
  request.setTaskId(task_id);
  request.setConsumerIndex(consumer_index);
  request.setRound(round);
  return Try(loop_, request.send().then([](auto response) { return response.getRemoved(); }));
}

kj::Promise<SplitView> DsClient::GetSplitAsync(uint64_t task_id, int64_t repetition,
                                               uint64_t sequence, uint32_t max_splits,
                                               uint32_t provider) {
  auto request = dispatcher().getSplitRequest();
  auto body = request.initRequest();
  body.setTaskId(task_id);
  body.setRepetition(repetition);
  body.setProviderIndex(provider);
  body.setSequence(sequence);
  body.setMaxSplits(max_splits);
  return request.send().then([](auto response) { return ToView(response.getResponse()); });
}

Result<SplitView> DsClient::GetSplit(uint64_t task_id, int64_t repetition, uint64_t sequence,
                                     uint32_t max_splits, uint32_t provider) {
  return Try(loop_, GetSplitAsync(task_id, repetition, sequence, max_splits, provider));
}

Result<std::vector<WorkerView>> DsClient::GetWorkers() {
  return Try(loop_, dispatcher().getWorkersRequest().send().then([](auto response) {
    std::vector<WorkerView> out;
    for (auto w : response.getWorkers()) {
      WorkerView view;
      view.worker_id = w.getWorkerId();
      view.address = w.getAddress();
      view.transfer_address = w.getTransferAddress();
      for (auto tag : w.getTags()) view.tags.push_back(tag);
      view.connected = w.getConnected();
      view.num_tasks = w.getNumTasks();
      out.push_back(view);
    }
    return out;
  }));
}

Result<std::vector<JobView>> DsClient::ListJobs() {
  return Try(loop_, dispatcher().listJobsRequest().send().then([](auto response) {
    std::vector<JobView> out;
    for (auto j : response.getJobs()) {
      JobView view;
      view.job_id = j.getJobId();
      view.dataset_id = j.getDatasetId();
      view.name = j.getJobName();
      view.processing_mode = j.getProcessingMode();
      view.num_clients = j.getNumClients();
      view.finished = j.getFinished();
      view.garbage_collected = j.getGarbageCollected();
      view.num_tasks = j.getNumTasks();
      out.push_back(view);
    }
    return out;
  }));
}

Result<std::vector<TaskView>> DsClient::ListTasks() {
  return Try(loop_, dispatcher().listTasksRequest().send().then([](auto response) {
    std::vector<TaskView> out;
    for (auto t : response.getTasks()) out.push_back(ToView(t));
    return out;
  }));
}

Result<std::vector<uint64_t>> DsClient::ListJobClients() {
  return Try(loop_, dispatcher().listJobClientsRequest().send().then([](auto response) {
    std::vector<uint64_t> out;
    for (auto c : response.getClients()) out.push_back(c.getJobClientId());
    return out;
  }));
}

Result<std::vector<uint64_t>> DsClient::ListDatasets() {
  return Try(loop_, dispatcher().listDatasetsRequest().send().then([](auto response) {
    std::vector<uint64_t> out;
    for (auto d : response.getDatasets()) out.push_back(d.getDatasetId());
    return out;
  }));
}

SimWorker::SimWorker(ClientLoop& loop, const std::string& dispatcher_address, std::string address,
                     uint64_t incarnation)
    : loop_(loop),
      address_(std::move(address)),
      incarnation_(incarnation != 0 ? incarnation : std::random_device{}() | 1),
      pushes_(std::make_shared<PushLog>()),
      conn_(loop.Connect(dispatcher_address)) {}

Status SimWorker::Heartbeat() {
  auto request = conn_->dispatcher().workerHeartbeatRequest();
  auto body = request.initRequest();
  body.setAddress(address_);
  body.setTransferAddress(address_ + "/transfer");
  body.initTags(1).set(0, "sim");
  body.setWorkerIncarnation(incarnation_);
  if (send_control_) body.setControl(kj::heap<RecordingControl>(pushes_));
  auto current = body.initCurrentTasks(static_cast<unsigned>(tasks_.size()));
  unsigned i = 0;
  for (const auto& [id, task] : tasks_) current.set(i++, id);
  if (!dataset_kinds_.empty()) {
    auto kinds = body.initDatasetKinds(static_cast<unsigned>(dataset_kinds_.size()));
    for (unsigned k = 0; k < dataset_kinds_.size(); ++k) kinds.set(k, dataset_kinds_[k]);
  }
  auto result = Try(loop_, request.send().then([this](auto response) {
    auto r = response.getResponse();
    worker_id_ = r.getWorkerId();
    last_incarnation_ = r.getIncarnation();
    heartbeat_interval_ms_ = r.getHeartbeatIntervalMillis();
    for (auto task : r.getNewTasks()) tasks_[task.getTaskId()] = ToView(task);
    last_deleted_.clear();
    for (uint64_t id : r.getTasksToDelete()) {
      tasks_.erase(id);
      last_deleted_.push_back(id);
    }
    return true;
  }));
  return result.status();
}

Status SimWorker::Complete(const std::vector<uint64_t>& task_ids) {
  auto request = conn_->dispatcher().workerUpdateRequest();
  request.setWorkerId(worker_id_);
  auto updates = request.initUpdates(static_cast<unsigned>(task_ids.size()));
  for (size_t i = 0; i < task_ids.size(); ++i) {
    updates[i].setTaskId(task_ids[i]);
    updates[i].setCompleted(true);
  }
  Status status = Try(loop_, request.send().then([](auto) { return true; })).status();
  if (status.ok()) {
    for (uint64_t id : task_ids) tasks_.erase(id);
  }
  return status;
}

void SimWorker::Reconnect(const std::string& dispatcher_address, bool keep_old) {
  auto fresh = loop_.Connect(dispatcher_address);
  if (keep_old) old_conn_ = kj::mv(conn_);
  conn_ = kj::mv(fresh);
}

Status SimWorker::PingOldConnection() {
  if (old_conn_.get() == nullptr) return FailedPreconditionError("no old connection kept");
  return Try(loop_, old_conn_->dispatcher().pingRequest().send().then([](auto) { return true; }))
      .status();
}

void SimWorker::Disconnect() {
  conn_ = nullptr;
  old_conn_ = nullptr;
}

std::optional<TaskView> SimWorker::TaskOf(uint64_t job_id) const {
  for (const auto& [id, task] : tasks_) {
    if (task.job_id == job_id) return task;
  }
  return std::nullopt;
}

}  // namespace dispatch::testing
