#include "reactor/data_service.h"

#include <map>

#include "common/log.h"
#include "reactor/task_info.h"
#include "state/task_routing.h"

namespace dispatch::reactor {

DataService::DataService(uv_loop_t* loop, DurableState& durable, DataServiceOptions options,
                         uint64_t incarnation)
    : loop_(loop),
      durable_(durable),
      options_(std::move(options)),
      incarnation_(incarnation),
      serving_clock_(loop),
      workers_(serving_clock_, durable, options_),
      consumers_(serving_clock_),
      datasets_(durable.state()),
      closures_(kj::refcounted<ClosureDispatcher>(loop, durable, workers_, options_.closures)) {
  workers_.SetWorkerLostHandler([this](uint64_t worker_id, const std::string& reason) {
    return closures_->OnWorkerLost(worker_id, reason);
  });
}

// Sessions may hold the closure dispatcher a while longer: it serves no more.
DataService::~DataService() { closures_->Close(); }

Status DataService::Start() {
  if (!options_.fault_tolerant_mode && durable_.state().NumApplied() > 0) {
    DISPATCH_RETURN_IF_ERROR(durable_.ResetKeepingIds());
    Log(LogLevel::kInfo,
        "fault-tolerant mode is off: starting from an empty state (clients of the previous run get "
        "clear errors)");
  }
  DISPATCH_RETURN_IF_ERROR(closures_->Start());
  workers_.Initialize();
  consumers_.Initialize(durable_.state(), durable_.NowMicros());
  StartTimers();
  return Status::Ok();
}

Status DataService::CheckWorkerAddress(std::string_view address) const {
  if (options_.worker_addresses.empty() || WorkerIndex(options_, address) >= 0) return Status::Ok();
  return FailedPreconditionError("worker address " + std::string(address) +
                                 " is not in the configured --worker-addresses list");
}

Status DataService::CheckName(std::string_view what, std::string_view value) const {
  if (value.size() > options_.max_name_bytes) {
    return InvalidArgumentError(std::string(what) + " of " + std::to_string(value.size()) +
                                " bytes is longer than the limit of " +
                                std::to_string(options_.max_name_bytes));
  }
  return Status::Ok();
}

Status DataService::CreateTasksForJob(uint64_t job_id) {
  std::map<std::string, std::vector<uint64_t>> created;
  // Only workers that can produce the job's dataset (see state/task_routing.h).
  for (const std::string& address : state::WorkersNeedingTask(state(), job_id)) {
    const uint64_t task_id = state().NextTaskId();
    DISPATCH_RETURN_IF_ERROR(Submit([&](journal::Update::Builder update) {
      auto create = update.initCreateTask();
      create.setTaskId(task_id);
      create.setJobId(job_id);
      create.setWorkerAddress(address);
    }));
    created[address].push_back(task_id);
  }
  for (auto& [address, ids] : created) workers_.PushStartTasks(address, std::move(ids));
  return Status::Ok();
}

Result<std::vector<uint64_t>> DataService::CreateMissingTasks(const std::string& address) {
  std::vector<uint64_t> created;
  // Only jobs whose dataset the worker can produce (see state/task_routing.h).
  for (const uint64_t job_id : state::JobsNeedingTask(state(), address)) {
    const uint64_t task_id = state().NextTaskId();
    Status status;
    if (state().FindJob(job_id)->IsRoundRobin()) {
      // Consumers agree on a round after the furthest any of them reported.
      const int64_t starting_round = consumers_.JobRound(state(), job_id) + 1;
      status = Submit([&](journal::Update::Builder update) {
        auto create = update.initCreatePendingTask();
        create.setTaskId(task_id);
        create.setJobId(job_id);
        create.setWorkerAddress(address);
        create.setStartingRound(starting_round);
      });
    } else {
      status = Submit([&](journal::Update::Builder update) {
        auto create = update.initCreateTask();
        create.setTaskId(task_id);
        create.setJobId(job_id);
        create.setWorkerAddress(address);
      });
    }
    if (!status.ok()) return status;
    created.push_back(task_id);
  }
  return created;
}

std::map<std::string, std::vector<uint64_t>> DataService::TasksByWorker(uint64_t job_id) const {
  std::map<std::string, std::vector<uint64_t>> by_worker;
  for (const state::Task* task : state().TasksForJob(job_id))
    by_worker[task->worker_address].push_back(task->id);
  for (const state::PendingTask* pending : state().PendingTasks(job_id)) {
    const state::Task* task = state().FindTask(pending->task_id);
    if (task != nullptr) by_worker[task->worker_address].push_back(task->id);
  }
  return by_worker;
}

}  // namespace dispatch::reactor
