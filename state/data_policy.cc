#include "state/data_policy.h"

namespace dispatch::state {

bool IsStaticSharding(ProcessingMode mode) {
  switch (mode) {
    case ProcessingMode::FILE:
    case ProcessingMode::DATA:
    case ProcessingMode::FILE_OR_DATA:
    case ProcessingMode::HINT:
      return true;
    default:
      return false;
  }
}

bool HandsOverTasks(const Job& job) {
  return !job.IsRoundRobin() &&
         (job.processing_mode == ProcessingMode::DYNAMIC || job.processing_mode == ProcessingMode::OFF);
}

Status CheckNameLength(std::string_view what, std::string_view value, uint64_t max_bytes) {
  if (value.size() > max_bytes) {
    return InvalidArgumentError(std::string(what) + " of " + std::to_string(value.size()) +
                                " bytes is longer than the limit of " + std::to_string(max_bytes));
  }
  return Status::Ok();
}

}  // namespace dispatch::state
