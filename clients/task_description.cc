#include "clients/task_description.h"

namespace dispatch::clients {

TaskDescription TaskDescription::FromReader(rpc::TaskInfo::Reader info) {
  TaskDescription task;
  task.task_id = info.getTaskId();
  task.job_id = info.getJobId();
  task.dataset_id = info.getDatasetId();
  task.worker_address = info.getWorkerAddress().cStr();
  task.transfer_address = info.getTransferAddress().cStr();
  task.starting_round = info.getStartingRound();
  task.processing_mode = info.getProcessingMode();
  task.worker_index = info.getWorkerIndex();
  task.num_workers = info.getNumWorkers();
  task.num_split_providers = info.getNumSplitProviders();
  task.num_consumers = info.getNumConsumers();
  task.finished = info.getFinished();
  task.pending = info.getPending();
  return task;
}

const char* ProcessingModeName(journal::ProcessingMode mode) {
  switch (mode) {
    case journal::ProcessingMode::OFF:
      return "off";
    case journal::ProcessingMode::DYNAMIC:
      return "dynamic";
    case journal::ProcessingMode::FILE:
      return "file";
    case journal::ProcessingMode::DATA:
      return "data";
    case journal::ProcessingMode::FILE_OR_DATA:
      return "file_or_data";
    case journal::ProcessingMode::HINT:
      return "hint";
  }
  return "unknown";
}

const char* TargetWorkersName(journal::TargetWorkers target) {
  switch (target) {
    case journal::TargetWorkers::AUTO:
      return "auto";
    case journal::TargetWorkers::ANY:
      return "any";
    case journal::TargetWorkers::LOCAL:
      return "local";
  }
  return "unknown";
}

}  // namespace dispatch::clients
