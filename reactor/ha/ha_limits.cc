#include "reactor/ha/ha_limits.h"

#include <algorithm>
#include <string>

#include "reactor/dispatcher_server.h"

namespace dispatch::ha {

Status ApplyHaLimits(reactor::DispatcherOptions& options) {
  reactor::DurableStateOptions& durable = options.durable;
  durable.max_batch_bytes = kHaMaxPassBytes;
  durable.result_bytes_per_commit = kHaResultBytesPerRecord;
  durable.result_file_bytes = 0;  // results ride in the etcd journal
  durable.record_limit_reason = ", --etcd: one etcd transaction carries at most " +
                                std::to_string(kMaxEtcdBatchBytes) + " bytes (kMaxEtcdBatchBytes)";
  options.max_record_bytes = kHaMaxRecordBytes;
  options.max_dataset_bytes = kHaMaxDatasetBytes;
  uint64_t& max_result = options.data.closures.max_result_bytes;
  if (max_result == 0)
    max_result = std::min<uint64_t>(kHaMaxResultBytes, options.limits.max_message_bytes / 2);
  if (max_result > kHaMaxResultBytes) {
    return InvalidArgumentError(
        "--max-result-bytes=" + std::to_string(max_result) + " is over the HA limit of " +
        std::to_string(kHaMaxResultBytes) +
        " bytes (--etcd: a result travels in one etcd transaction of at most " +
        std::to_string(kMaxEtcdBatchBytes) + " bytes, kMaxEtcdBatchBytes)");
  }
  return Status::Ok();
}

}  // namespace dispatch::ha
