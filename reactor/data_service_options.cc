#include "reactor/data_service_options.h"

#include <algorithm>

namespace dispatch::reactor {

namespace {
constexpr uint64_t kLongestDerivedIntervalMs = 10 * 1000;
}  // namespace

uint64_t HeartbeatIntervalMs(const DataServiceOptions& options) {
  if (options.worker_heartbeat_interval_ms != 0) return options.worker_heartbeat_interval_ms;
  if (options.worker_timeout_ms == 0) return kLongestDerivedIntervalMs;
  return std::clamp<uint64_t>(options.worker_timeout_ms / 4, 1, kLongestDerivedIntervalMs);
}

uint64_t WorkerGraceMs(const DataServiceOptions& options) {
  if (options.worker_timeout_ms == 0) return options.worker_grace_ms;
  return std::min(options.worker_grace_ms, options.worker_timeout_ms);
}

Status CheckHeartbeatInterval(const DataServiceOptions& options) {
  const uint64_t interval = options.worker_heartbeat_interval_ms;
  const uint64_t timeout = options.worker_timeout_ms;
  if (interval == 0 || timeout == 0 || interval <= timeout / 2) return Status::Ok();
  return InvalidArgumentError(
      "--worker-heartbeat-interval-ms=" + std::to_string(interval) +
      " is over half of --worker-timeout-ms=" + std::to_string(timeout) +
      ": a worker heartbeating as told would be removed as silent. Set it to at most " +
      std::to_string(timeout / 2) + ", or leave it out (0: a quarter of the timeout)");
}

}  // namespace dispatch::reactor
