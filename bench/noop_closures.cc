#include "bench/noop_closures.h"

#include <chrono>
#include <stdexcept>
#include <vector>

namespace dispatch::bench {
namespace {

void ThrowIfFailed(const Status& status, const char* what) {
  if (!status.ok()) throw std::runtime_error(std::string(what) + ": " + status.ToString());
}

}  // namespace

std::unique_ptr<testing::Subprocess> StartNoopWorker(const std::string& dispatcher,
                                                     uint64_t slots) {
  auto worker = std::make_unique<testing::Subprocess>(std::vector<std::string>{
      DISPATCH_WORKER_BINARY, "--dispatcher=" + dispatcher, "--address=tcp:127.0.0.1:0",
      "--max-closures=" + std::to_string(slots), "--log-level=warning"});
  for (int lines = 0; lines < 2; ++lines) {  // "started", then "registered"
    if (!worker->ReadLine(std::chrono::seconds(30))) {
      throw std::runtime_error("dispatch-worker did not start and register");
    }
  }
  return worker;
}

double NoopClosuresPerSecond(clients::Coordinator& coordinator, uint64_t count) {
  std::vector<clients::RemoteValue> values;
  values.reserve(count);
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    auto value = coordinator.Schedule("noop");
    ThrowIfFailed(value.status(), "Schedule");
    values.push_back(*value);
  }
  for (auto& value : values) ThrowIfFailed(value.Fetch().status(), "Fetch");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(count) / seconds;
}

}  // namespace dispatch::bench
