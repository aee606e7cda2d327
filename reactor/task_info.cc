#include "reactor/task_info.h"

#include <string_view>

#include "reactor/dataset_catalog.h"
#include "state/data_policy.h"

namespace dispatch::reactor {

int64_t WorkerIndex(const DataServiceOptions& options, std::string_view address) {
  for (size_t i = 0; i < options.worker_addresses.size(); ++i) {
    if (options.worker_addresses[i] == address) return static_cast<int64_t>(i);
  }
  return -1;
}

void FillTaskInfo(const state::DispatcherState& state, const DataServiceOptions& options,
                  const state::Task& task, rpc::TaskInfo::Builder info) {
  const state::Job* job = state.FindJob(task.job_id);
  info.setTaskId(task.id);
  info.setJobId(task.job_id);
  info.setWorkerAddress(task.worker_address);
  info.setTransferAddress(task.transfer_address);
  info.setStartingRound(task.starting_round);
  info.setFinished(task.finished);
  info.setPending(task.pending);
  info.setWorkerIndex(-1);
  if (job == nullptr) return;  // REQUIRES a task of a known job; defensive only
  info.setDatasetId(job->dataset_id);
  info.setProcessingMode(job->processing_mode);
  if (state::IsStaticSharding(job->processing_mode)) {
    info.setWorkerIndex(WorkerIndex(options, task.worker_address));
    info.setNumWorkers(static_cast<uint32_t>(options.worker_addresses.size()));
  }
  info.setNumSplitProviders(static_cast<uint32_t>(job->providers.size()));
  info.setNumConsumers(job->num_consumers);
}

uint64_t TaskListVersion(const std::vector<const state::Task*>& tasks) {
  std::string bytes;
  for (const state::Task* task : tasks) {
    bytes += std::to_string(task->id) + '\0' + task->worker_address + '\0' +
             task->transfer_address + '\0' + std::to_string(task->starting_round) +
             (task->finished ? "f" : "u") + '\n';
  }
  uint64_t version = FingerprintOf(bytes);
  return version == 0 ? 1 : version;
}

}  // namespace dispatch::reactor
