// TaskTable: the tasks a WorkerAgent holds, on the agent thread. A task
// assigned twice (pushed and in a heartbeat reply, or again after a restart)
// is started once. Each task runs its TaskHandler; when Run() resolves the
// task is queued for a completion report (workerUpdate, retried across
// reconnects until acknowledged). A task is forgotten, and its handler
// cancelled, only when the dispatcher deletes it or the agent stops.
#pragma once

#include <kj/async.h>
#include <kj/timer.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "clients/agent_link.h"
#include "clients/agent_status.h"
#include "clients/task_handler.h"

namespace dispatch::clients {

class TaskTable final : public AgentLink::Delegate, public kj::TaskSet::ErrorHandler {
 public:
  TaskTable(kj::Timer& timer, TaskHandlerFactory& factory, StatusBoard& board, uint32_t split_batch,
            uint64_t first_split_sequence = 1);
  ~TaskTable() noexcept(false) override;
  TaskTable(const TaskTable&) = delete;
  TaskTable& operator=(const TaskTable&) = delete;

  // REQUIRES: called once, before the link runs.
  void set_link(AgentLink* link) { link_ = link; }

  // AgentLink::Delegate
  std::vector<uint64_t> CurrentTaskIds() override;
  void OnTasksAssigned(capnp::List<rpc::TaskInfo>::Reader tasks) override;
  void OnTasksToDelete(capnp::List<uint64_t>::Reader task_ids) override;

  // The handler of a task the agent holds (for services that serve its
  // output, such as a data-transfer server); null when unknown or unrunnable.
  kj::Maybe<TaskHandler&> FindHandler(uint64_t task_id);
  // Cancels every task and pending report. The agent is stopping.
  void StopAll();

 private:
  class Context;
  struct Entry;

  void Start(const TaskDescription& task);
  void OnFinished(uint64_t task_id);
  void OnFailed(uint64_t task_id, kj::Exception&& e);
  void FlushCompletions();
  void PublishTaskIds();
  kj::Promise<DatasetDefinition> GetDatasetDef(uint64_t dataset_id);
  void taskFailed(kj::Exception&& exception) override;

  kj::Timer& timer_;
  TaskHandlerFactory& factory_;
  StatusBoard& board_;
  const uint32_t split_batch_;
  const uint64_t first_split_sequence_;
  AgentLink* link_ = nullptr;
  std::map<uint64_t, kj::Own<Entry>> tasks_;
  std::set<uint64_t> unreported_;  // finished, not yet acknowledged by workerUpdate
  bool flushing_ = false;
  bool send_singly_ = false;  // a batch was refused: find the bad id one at a time
  std::map<uint64_t, DatasetDefinition> dataset_defs_;
  kj::Own<kj::TaskSet> background_;
};

}  // namespace dispatch::clients
