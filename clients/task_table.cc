#include "clients/task_table.h"

#include <kj/debug.h>

#include <algorithm>

#include "clients/split_fetcher.h"
#include "common/log.h"
#include "common/rpc_status.h"

namespace dispatch::clients {

class TaskTable::Context final : public TaskContext {
 public:
  Context(TaskTable& table, TaskDescription task) : table_(table), task_(kj::mv(task)) {
    uint32_t providers = std::max<uint32_t>(1, task_.num_split_providers);
    for (uint32_t i = 0; i < providers; ++i) {
      fetchers_.add(kj::heap<LinkSplitFetcher>(*table_.link_, table_.timer_, table_.board_,
                                               task_.task_id, i, table_.split_batch_,
                                               table_.first_split_sequence_));
    }
  }

  const TaskDescription& task() const override { return task_; }
  SplitFetcher& splits(uint32_t provider_index) override {
    KJ_REQUIRE(provider_index < fetchers_.size(), "no such split provider", task_.task_id,
               provider_index);
    return *fetchers_[provider_index];
  }
  kj::Promise<DatasetDefinition> GetDatasetDef() override {
    return table_.GetDatasetDef(task_.dataset_id);
  }
  kj::Timer& timer() override { return table_.timer_; }

 private:
  TaskTable& table_;
  TaskDescription task_;
  kj::Vector<kj::Own<LinkSplitFetcher>> fetchers_;
};

struct TaskTable::Entry {
  kj::Own<Context> context;
  kj::Own<TaskHandler> handler;  // null: this worker cannot run the task
  bool finished = false;
  kj::Promise<void> run = nullptr;  // declared last: cancelled before the rest goes
};

TaskTable::TaskTable(kj::Timer& timer, TaskHandlerFactory& factory, StatusBoard& board,
                     uint32_t split_batch, uint64_t first_split_sequence)
    : timer_(timer),
      factory_(factory),
      board_(board),
      split_batch_(split_batch == 0 ? 1 : split_batch),
      first_split_sequence_(first_split_sequence == 0 ? 1 : first_split_sequence),
      background_(kj::heap<kj::TaskSet>(*this)) {}

TaskTable::~TaskTable() noexcept(false) { StopAll(); }

std::vector<uint64_t> TaskTable::CurrentTaskIds() {
  std::vector<uint64_t> ids;
  ids.reserve(tasks_.size());
  for (auto& [id, entry] : tasks_) ids.push_back(id);
  return ids;
}

void TaskTable::OnTasksAssigned(capnp::List<rpc::TaskInfo>::Reader tasks) {
  bool changed = false;
  for (auto info : tasks) {
    if (tasks_.count(info.getTaskId()) != 0) continue;  // idempotent
    Start(TaskDescription::FromReader(info));
    changed = true;
  }
  if (changed) PublishTaskIds();
}

void TaskTable::Start(const TaskDescription& task) {
  KJ_REQUIRE(link_ != nullptr, "TaskTable used before set_link()");
  auto entry = kj::heap<Entry>();
  entry->context = kj::heap<Context>(*this, task);
  entry->handler = factory_.CreateHandler(task);
  uint64_t id = task.task_id;
  if (entry->handler.get() == nullptr) {
    Log(LogLevel::kWarning, "task ", id, " of job ", task.job_id, " (",
        ProcessingModeName(task.processing_mode), "): this worker cannot run it; holding it");
    tasks_.emplace(id, kj::mv(entry));
    return;
  }
  Log(LogLevel::kDebug, "task ", id, " of job ", task.job_id, " (",
      ProcessingModeName(task.processing_mode), ") started");
  TaskHandler& handler = *entry->handler;
  Context& context = *entry->context;
  // evalLater: a handler that throws at once fails its task, not this call.
  entry->run = kj::evalLater([&handler, &context]() { return handler.Run(context); })
                   .then([this, id]() { OnFinished(id); },
                         [this, id](kj::Exception&& e) { OnFailed(id, kj::mv(e)); })
                   .eagerlyEvaluate(nullptr);
  tasks_.emplace(id, kj::mv(entry));
  board_.Update([](WorkerAgentStatus& s) { ++s.tasks_started; });
}

void TaskTable::OnFinished(uint64_t task_id) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  it->second->finished = true;
  Log(LogLevel::kDebug, "task ", task_id, " complete");
  board_.Update([](WorkerAgentStatus& s) { ++s.tasks_completed; });
  unreported_.insert(task_id);
  FlushCompletions();
}

void TaskTable::OnFailed(uint64_t task_id, kj::Exception&& e) {
  Log(LogLevel::kWarning, "task ", task_id, " failed: ", e.getDescription());
  std::string text(e.getDescription().cStr());
  board_.Update([&](WorkerAgentStatus& s) {
    ++s.tasks_failed;
    s.last_error = text;
  });
}

void TaskTable::OnTasksToDelete(capnp::List<uint64_t>::Reader task_ids) {
  bool changed = false;
  for (uint64_t id : task_ids) {
    auto it = tasks_.find(id);
    if (it == tasks_.end()) continue;
    // Moved out first: the handler's destructor may look at the table.
    kj::Own<Entry> entry = kj::mv(it->second);
    tasks_.erase(it);
    unreported_.erase(id);
    entry = nullptr;
    Log(LogLevel::kDebug, "task ", id, " deleted");
    changed = true;
  }
  if (changed) PublishTaskIds();
}

kj::Maybe<TaskHandler&> TaskTable::FindHandler(uint64_t task_id) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end() || it->second->handler.get() == nullptr) return nullptr;
  return *it->second->handler;
}

void TaskTable::StopAll() {
  background_ = nullptr;
  flushing_ = false;
  auto tasks = kj::mv(tasks_);
  tasks_.clear();
  tasks.clear();
  unreported_.clear();
  PublishTaskIds();
  background_ = kj::heap<kj::TaskSet>(*this);
}

void TaskTable::PublishTaskIds() {
  std::vector<uint64_t> ids = CurrentTaskIds();
  board_.Update([&](WorkerAgentStatus& s) { s.tasks = ids; });
}

void TaskTable::FlushCompletions() {
  if (flushing_ || unreported_.empty() || link_ == nullptr) return;
  flushing_ = true;
  std::vector<uint64_t> batch;
  for (uint64_t id : unreported_) {
    batch.push_back(id);
    if (send_singly_ || batch.size() >= 1024) break;
  }
  AgentLink* link = link_;
  auto call = [batch, link](rpc::Dispatcher::Client dispatcher) -> kj::Promise<uint64_t> {
    auto request = dispatcher.workerUpdateRequest();
    request.setWorkerId(link->worker_id());
    auto updates = request.initUpdates(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      updates[i].setTaskId(batch[i]);
      updates[i].setCompleted(true);
    }
    return request.send().then(
        [](capnp::Response<rpc::Dispatcher::WorkerUpdateResults> r) { return r.getIncarnation(); });
  };
  background_->add(CallWithRetry<uint64_t>(*link_, timer_, kj::mv(call))
                       .then(
                           [this, batch](uint64_t) {
                             for (uint64_t id : batch) unreported_.erase(id);
                             board_.Update([&](WorkerAgentStatus& s) {
                               s.completions_reported += batch.size();
                             });
                             if (unreported_.empty()) send_singly_ = false;
                             flushing_ = false;
                             FlushCompletions();
                           },
                           [this, batch](kj::Exception&& e) {
                             flushing_ = false;
                             if (batch.size() == 1) {
                               // The dispatcher refuses this one (say, a task it forgot in
                               // a restart without fault tolerance): nothing to retry.
                               Log(LogLevel::kWarning, "completion of task ", batch[0],
                                   " refused: ", e.getDescription());
                               unreported_.erase(batch[0]);
                             } else {
                               send_singly_ = true;
                             }
                             FlushCompletions();
                           }));
}

kj::Promise<DatasetDefinition> TaskTable::GetDatasetDef(uint64_t dataset_id) {
  auto it = dataset_defs_.find(dataset_id);
  if (it != dataset_defs_.end()) return DatasetDefinition(it->second);
  auto call = [dataset_id](rpc::Dispatcher::Client dispatcher) -> kj::Promise<DatasetDefinition> {
    auto request = dispatcher.getDatasetDefRequest();
    request.setDatasetId(dataset_id);
    return request.send().then(
        [dataset_id](capnp::Response<rpc::Dispatcher::GetDatasetDefResults> r) {
          DatasetDefinition def;
          def.dataset_id = dataset_id;
          auto bytes = r.getDefinition();
          def.definition.assign(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
          auto metadata = r.getMetadata();
          def.metadata.assign(reinterpret_cast<const char*>(metadata.begin()), metadata.size());
          return def;
        });
  };
  return CallWithRetry<DatasetDefinition>(*link_, timer_, kj::mv(call))
      .then([this](DatasetDefinition&& def) {
        dataset_defs_.emplace(def.dataset_id, def);
        return kj::mv(def);
      });
}

void TaskTable::taskFailed(kj::Exception&& exception) {
  Log(LogLevel::kWarning, "worker background call failed: ", exception.getDescription());
}

}  // namespace dispatch::clients
