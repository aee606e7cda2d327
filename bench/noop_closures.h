// What the closure benches (`closures`, `closures-ha`) share: dispatch-worker
// processes that run the built-in "noop" function, and a throughput round of
// no-op closures through a Coordinator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "clients/coordinator.h"
#include "tests/support/subprocess.h"

namespace dispatch::bench {

// A dispatch-worker with `slots` closure slots on a port the OS picks,
// registered with `dispatcher` before it returns; throws if it does not.
std::unique_ptr<testing::Subprocess> StartNoopWorker(const std::string& dispatcher, uint64_t slots);

// Schedules `count` no-op closures, then fetches them all; returns
// closures/s over that span. Throws on the first failed call.
double NoopClosuresPerSecond(clients::Coordinator& coordinator, uint64_t count);

}  // namespace dispatch::bench
