#include "reactor/closure_traces.h"

#include <algorithm>

namespace dispatch::reactor {

void ClosureTraces::Start(uint64_t closure_id, capnp::List<uint64_t>::Reader client,
                          uint64_t received_ns) {
  if (traces_.contains(closure_id)) return;
  if (traces_.size() >= max_) {
    ++dropped_;
    return;
  }
  Stamps& stamps = traces_[closure_id];
  stamps.fill(0);
  const size_t n = std::min<size_t>(client.size(), kTraceClientStamps);
  for (size_t i = 0; i < n; ++i) stamps[i] = client[static_cast<unsigned>(i)];
  stamps[kTraceDispatcherReceived] = received_ns;
}

void ClosureTraces::Stamp(uint64_t closure_id, ClosureTraceStage stage, uint64_t ns) {
  auto it = traces_.find(closure_id);
  if (it != traces_.end() && stage < kTraceOutcomeStamps) it->second[stage] = ns;
}

void ClosureTraces::OnReport(uint64_t closure_id, capnp::List<uint64_t>::Reader worker,
                             uint64_t received_ns) {
  auto it = traces_.find(closure_id);
  if (it == traces_.end()) return;
  const size_t n = std::min<size_t>(worker.size(), kTraceWorkerStamps);
  for (size_t i = 0; i < n; ++i)
    it->second[kTraceWorkerReceived + i] = worker[static_cast<unsigned>(i)];
  it->second[kTraceReportReceived] = received_ns;
}

std::optional<ClosureTraces::Stamps> ClosureTraces::Take(uint64_t closure_id) {
  auto it = traces_.find(closure_id);
  if (it == traces_.end()) return std::nullopt;
  Stamps stamps = it->second;
  traces_.erase(it);
  return stamps;
}

}  // namespace dispatch::reactor
