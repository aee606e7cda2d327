// The closure functions `dispatch-worker` ships for tests, demos and
// benchmarks. Each is small and deterministic given its args, so a test can
// tell from a result which worker ran it and what it received. kHelp lists
// them for --help; RegisterBuiltinFunctions adds them all to an agent.
#pragma once

#include "clients/pattern_bytes.h"
#include "clients/worker_agent.h"
#include "common/status.h"

namespace dispatch::clients {

extern const char kBuiltinFunctionsHelp[];

// REQUIRES: before agent.Start().
Status RegisterBuiltinFunctions(WorkerAgent& agent);

}  // namespace dispatch::clients
