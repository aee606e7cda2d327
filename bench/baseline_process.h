// The yardstick server (dispatch-baseline-server: the dispatcher's interface
// on Cap'n Proto's own EzRpcServer), started for one measurement.
#pragma once

#include <memory>
#include <string>

#include "tests/support/subprocess.h"

namespace dispatch::bench {

// Starts the baseline server on a port of the OS's choosing and sets
// `*address` to its "tcp:HOST:PORT". Throws if it does not start.
std::unique_ptr<testing::Subprocess> StartBaseline(std::string* address);

}  // namespace dispatch::bench
