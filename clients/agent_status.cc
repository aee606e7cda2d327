#include "clients/agent_status.h"

namespace dispatch::clients {

void StatusBoard::Update(const std::function<void(WorkerAgentStatus&)>& change) {
  WorkerAgentStatus copy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    change(status_);
    if (listener_) copy = status_;
  }
  changed_.notify_all();
  if (listener_) listener_(copy);
}

WorkerAgentStatus StatusBoard::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

bool StatusBoard::WaitFor(const std::function<bool(const WorkerAgentStatus&)>& condition,
                          std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return condition(status_); });
}

}  // namespace dispatch::clients
