#include "reactor/closure_watchdog.h"

#include <cinttypes>
#include <cstdio>

#include "common/log.h"

namespace dispatch::reactor {
namespace {

std::string Seconds(double seconds) {
  char text[32];
  snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

}  // namespace

void ClosureWatchdog::Check(const state::DispatcherState& state, int64_t now_micros,
                            const ClosureTimings& timings, uint64_t now_ns) {
  const uint64_t running = state.NumClosuresInState(state::ClosureState::ASSIGNED);
  const int64_t quiet_since = watch_.quiet_since_micros();
  switch (watch_.Check(now_micros, running)) {
    case state::StuckClosureWatch::Change::kNone:
      if (watch_.stuck()) stuck_running_ = running;
      return;
    case state::StuckClosureWatch::Change::kBecameStuck:
      stuck_running_ = running;
      last_warning_ = Describe(state, now_micros, running, timings, now_ns);
      Log(LogLevel::kWarning, last_warning_.c_str());
      return;
    case state::StuckClosureWatch::Change::kMovingAgain:
      stuck_running_ = 0;
      Log(LogLevel::kInfo, "closures moving again after ",
          Seconds(static_cast<double>(now_micros - quiet_since) * 1e-6).c_str(),
          " without a finished run: ", running, " running");
      return;
  }
}

std::string ClosureWatchdog::Describe(const state::DispatcherState& state, int64_t now_micros,
                                      uint64_t running, const ClosureTimings& timings,
                                      uint64_t now_ns) const {
  std::string text = "closures stuck: " + std::to_string(running) + " running and none finished for " +
                     Seconds(static_cast<double>(now_micros - watch_.quiet_since_micros()) * 1e-6) +
                     " (--stuck-closure-warning-ms=" + std::to_string(watch_.threshold_micros() / 1000) +
                     "):";
  const std::vector<state::RunningClosure> listed = state::ListRunning(state, kMaxListed);
  for (size_t i = 0; i < listed.size(); ++i) {
    const state::RunningClosure& c = listed[i];
    text += i == 0 ? " " : "; ";
    text += "closure " + std::to_string(c.closure_id) + " function " + c.function + " on worker " +
            std::to_string(c.worker_id) + " (" +
            (c.worker_address.empty() ? std::string("gone") : c.worker_address) + ") attempt " +
            std::to_string(c.attempt);
    std::optional<uint64_t> since = timings.RunningSinceNs(c.closure_id);
    text += since.has_value() ? ", running for " + Seconds(static_cast<double>(now_ns - *since) * 1e-9)
                              : std::string(", run time not tracked");
  }
  if (running > listed.size()) text += "; and " + std::to_string(running - listed.size()) + " more";
  return text;
}

}  // namespace dispatch::reactor
