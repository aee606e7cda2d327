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

const char* ProcessingModeName(rpc::ProcessingMode mode) {
  switch (mode) {
    case rpc::ProcessingMode::OFF:
      return "off";
    case rpc::ProcessingMode::DYNAMIC:
      return "dynamic";
    case rpc::ProcessingMode::FILE:
      return "file";
    case rpc::ProcessingMode::DATA:
      return "data";
    case rpc::ProcessingMode::FILE_OR_DATA:
      return "file_or_data";
    case rpc::ProcessingMode::HINT:
      return "hint";
  }
  return "unknown";
}

std::optional<rpc::ProcessingMode> ParseProcessingMode(std::string_view name) {
  for (rpc::ProcessingMode mode :
       {rpc::ProcessingMode::OFF, rpc::ProcessingMode::DYNAMIC, rpc::ProcessingMode::FILE,
        rpc::ProcessingMode::DATA, rpc::ProcessingMode::FILE_OR_DATA, rpc::ProcessingMode::HINT}) {
    if (name == ProcessingModeName(mode)) return mode;
  }
  return std::nullopt;
}

const char* TargetWorkersName(rpc::TargetWorkers target) {
  switch (target) {
    case rpc::TargetWorkers::AUTO:
      return "auto";
    case rpc::TargetWorkers::ANY:
      return "any";
    case rpc::TargetWorkers::LOCAL:
      return "local";
  }
  return "unknown";
}

}  // namespace dispatch::clients
