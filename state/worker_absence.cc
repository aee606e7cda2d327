#include "state/worker_absence.h"

namespace dispatch::state {

void WorkerAbsence::Initialize(const DispatcherState& state, uint64_t now_ms) {
  since_ms_.clear();
  for (const std::string& address : state.TaskAddresses()) {
    if (state.FindWorkerByAddress(address) == nullptr) since_ms_.emplace(address, now_ms);
  }
}

void WorkerAbsence::Gone(const std::string& address, uint64_t now_ms) {
  since_ms_.try_emplace(address, now_ms);
}

void WorkerAbsence::Forget(std::string_view address) {
  auto it = since_ms_.find(address);
  if (it != since_ms_.end()) since_ms_.erase(it);
}

}  // namespace dispatch::state
