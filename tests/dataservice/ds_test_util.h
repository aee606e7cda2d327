// Test kit for the data-service suites: plain views of the dispatcher's
// replies, a client (DsClient) whose calls return Result<view> so tests assert
// on errors as easily as on values, and SimWorker: a simulated worker that
// heartbeats over its own connection and serves a WorkerControl capability
// recording what the dispatcher pushed. Everything runs on the test's
// ClientLoop; every wait has a deadline.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/rpc_status.h"
#include "common/status.h"
#include "clients/task_description.h"
#include "schema/dispatcher.capnp.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"

namespace dispatch::testing {

// The seed of a randomised test: $DISPATCH_TEST_SEED or a fresh one, printed.
uint64_t TestSeed();

// Runs `promise` on the loop; a failed call becomes its Status.
template <typename T>
Result<T> Try(ClientLoop& loop, kj::Promise<T> promise) {
  std::optional<T> value;
  Status status;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { value.emplace(loop.Wait(kj::mv(promise))); })) {
    status = StatusFromException(*e);
  }
  if (value.has_value()) return std::move(*value);
  return status;
}

// A task as the dispatcher described it: the client library's own copy type.
using TaskView = clients::TaskDescription;
inline TaskView ToView(rpc::TaskInfo::Reader info) { return TaskView::FromReader(info); }

struct JobIds {
  uint64_t job_id = 0;
  uint64_t job_client_id = 0;
  uint64_t incarnation = 0;
};

struct ClientHeartbeatView {
  uint64_t version = 0;
  bool changed = false;
  std::vector<TaskView> tasks;
  bool job_finished = false;
  int64_t block_round = -1;
  uint64_t incarnation = 0;
};

struct SplitView {
  std::vector<uint64_t> indices;
  std::vector<std::string> payloads;
  bool end_of_splits = false;
  int64_t repetition = 0;
  uint64_t incarnation = 0;
};
SplitView ToView(rpc::SplitResponse::Reader response);

struct DatasetDefView {
  std::string definition;
  rpc::SplitSource::Which split_kind = rpc::SplitSource::NONE;
  uint64_t num_indexed = 0;
  std::vector<std::string> payloads;
  std::string metadata;
  uint64_t incarnation = 0;
};

struct WorkerView {
  uint64_t worker_id = 0;
  std::string address;
  std::string transfer_address;
  std::vector<std::string> tags;
  bool connected = false;
  uint32_t num_tasks = 0;
};

struct JobView {
  uint64_t job_id = 0;
  uint64_t dataset_id = 0;
  std::string name;
  rpc::ProcessingMode processing_mode = rpc::ProcessingMode::OFF;
  uint32_t num_clients = 0;
  bool finished = false;
  bool garbage_collected = false;
  uint32_t num_tasks = 0;
};

// What getOrRegisterDataset is given besides the definition.
struct DatasetSpec {
  std::string definition;
  std::optional<uint64_t> indexed_splits;
  std::vector<std::string> explicit_splits;
  std::string element_spec;
  std::string metadata;
};

struct JobSpec {
  uint64_t dataset_id = 0;
  rpc::ProcessingMode mode = rpc::ProcessingMode::OFF;
  std::string name;
  int64_t name_index = 0;
  uint32_t num_consumers = 0;
  rpc::TargetWorkers target = rpc::TargetWorkers::AUTO;
  bool requeue_unfinished_splits = false;
};

// A consumer / operator connection with one call per operation.
class DsClient {
 public:
  DsClient(ClientLoop& loop, const std::string& address);

  rpc::Dispatcher::Client& dispatcher() { return conn_->dispatcher(); }
  uint64_t Incarnation();

  Result<uint64_t> RegisterDataset(const DatasetSpec& spec);
  Result<DatasetDefView> GetDatasetDef(uint64_t dataset_id);
  Result<std::string> GetElementSpec(uint64_t dataset_id);
  Result<JobIds> GetOrCreateJob(const JobSpec& spec);
  Result<ClientHeartbeatView> ClientHeartbeat(uint64_t job_client_id, int64_t current_round = -1,
                                              int64_t blocked_round = -1,
                                              uint64_t known_version = 0);
  Status ReleaseJobClient(uint64_t job_client_id);
  Result<bool> MaybeRemoveTask(uint64_t task_id, uint32_t consumer_index, int64_t round);
  kj::Promise<SplitView> GetSplitAsync(uint64_t task_id, int64_t repetition, uint64_t sequence,
                                       uint32_t max_splits = 1, uint32_t provider = 0);
  Result<SplitView> GetSplit(uint64_t task_id, int64_t repetition, uint64_t sequence,
                             uint32_t max_splits = 1, uint32_t provider = 0);
  Result<std::vector<WorkerView>> GetWorkers();
  Result<std::vector<JobView>> ListJobs();
  Result<std::vector<TaskView>> ListTasks();
  Result<std::vector<uint64_t>> ListJobClients();
  Result<std::vector<uint64_t>> ListDatasets();

 private:
  ClientLoop& loop_;
  kj::Own<clients::DispatcherConnection> conn_;
};

// What a simulated worker's WorkerControl received.
struct PushLog {
  std::vector<TaskView> started;
  std::vector<uint64_t> deleted;
  int fail_next_starts = 0;  // answer this many startTasks with an error
  int failed_starts = 0;
  bool hold_starts = false;  // record startTasks but never answer them
  int held_starts = 0;
};

class SimWorker {
 public:
  SimWorker(ClientLoop& loop, const std::string& dispatcher_address, std::string address,
            uint64_t incarnation = 0);

  // Heartbeats with the tasks it runs; adopts new tasks and drops deleted ones.
  Status Heartbeat();
  // Reports tasks complete (workerUpdate) and forgets them.
  Status Complete(const std::vector<uint64_t>& task_ids);
  // A new connection; the old one is closed unless `keep_old`.
  void Reconnect(const std::string& dispatcher_address, bool keep_old = false);
  // Drops the connection (the dispatcher sees EOF).
  void Disconnect();
  // false: its heartbeats carry no WorkerControl (tasks come in replies only).
  void set_send_control(bool send) { send_control_ = send; }
  // The dataset kinds its heartbeats announce (none by default: every job).
  void set_dataset_kinds(std::vector<std::string> kinds) { dataset_kinds_ = std::move(kinds); }
  // A round trip on the connection kept by Reconnect(keep_old = true): what
  // the dispatcher sent on it before its reply (pushes) has arrived after.
  Status PingOldConnection();

  const std::string& address() const { return address_; }
  uint64_t worker_id() const { return worker_id_; }
  uint64_t last_incarnation() const { return last_incarnation_; }
  uint32_t heartbeat_interval_ms() const { return heartbeat_interval_ms_; }
  const std::map<uint64_t, TaskView>& tasks() const { return tasks_; }
  std::vector<uint64_t> last_deleted() const { return last_deleted_; }
  // The task of `job_id` it runs; nullopt when none.
  std::optional<TaskView> TaskOf(uint64_t job_id) const;
  PushLog& pushes() { return *pushes_; }
  rpc::Dispatcher::Client& dispatcher() { return conn_->dispatcher(); }

 private:
  ClientLoop& loop_;
  std::string address_;
  uint64_t incarnation_;
  std::shared_ptr<PushLog> pushes_;
  kj::Own<clients::DispatcherConnection> conn_;
  kj::Own<clients::DispatcherConnection> old_conn_;
  std::map<uint64_t, TaskView> tasks_;
  std::vector<uint64_t> last_deleted_;
  uint64_t worker_id_ = 0;
  uint64_t last_incarnation_ = 0;
  uint32_t heartbeat_interval_ms_ = 0;
  bool send_control_ = true;
  std::vector<std::string> dataset_kinds_;
};

}  // namespace dispatch::testing
