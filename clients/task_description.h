// TaskDescription: a task as the dispatcher describes it (rpc::TaskInfo),
// copied out of the message that carried it so it can outlive that message.
// Used by WorkerAgent's task handlers and by the consumer client's task list.
// Plain data: copyable, no capabilities, no references into Cap'n Proto memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

struct TaskDescription {
  uint64_t task_id = 0;
  uint64_t job_id = 0;
  uint64_t dataset_id = 0;
  std::string worker_address;
  std::string transfer_address;
  int64_t starting_round = 0;
  rpc::ProcessingMode processing_mode = rpc::ProcessingMode::OFF;
  // Static sharding: this worker's place in the configured list; -1 / 0 otherwise.
  int64_t worker_index = -1;
  uint32_t num_workers = 0;
  uint32_t num_split_providers = 0;
  uint32_t num_consumers = 0;
  bool finished = false;
  bool pending = false;

  static TaskDescription FromReader(rpc::TaskInfo::Reader info);
  bool operator==(const TaskDescription&) const = default;
};

// "off", "dynamic", "file", "data", "file_or_data", "hint".
const char* ProcessingModeName(rpc::ProcessingMode mode);
// The inverse of ProcessingModeName; nullopt for any other name.
std::optional<rpc::ProcessingMode> ParseProcessingMode(std::string_view name);
// "auto", "any", "local".
const char* TargetWorkersName(rpc::TargetWorkers target);

}  // namespace dispatch::clients
