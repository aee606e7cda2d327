// AgentService: something else a worker serves from the WorkerAgent's own
// loop, beside the dispatcher link (the data-transfer server of issue 6 is
// the intended one). A service starts once the agent loop is up and is
// cancelled (its promise dropped) when the agent stops, before the tasks go.
// Everything here runs on the agent thread.
#pragma once

#include <kj/async-io.h>
#include <kj/timer.h>

#include <cstdint>

#include "clients/task_handler.h"
#include "clients/worker_agent_options.h"

namespace dispatch::clients {

// What a service may use; valid while its Run() promise is.
class AgentEnvironment {
 public:
  virtual ~AgentEnvironment() noexcept(false) = default;
  virtual kj::Network& network() = 0;
  // For a socket made before the agent started (TransferServer::
  // ListenOnFreePort binds on the caller's thread to learn its port).
  virtual kj::LowLevelAsyncIoProvider& low_level() = 0;
  virtual kj::Timer& timer() = 0;
  virtual const WorkerAgentOptions& options() = 0;
  // The handler of a task this worker holds and runs; null otherwise.
  virtual kj::Maybe<TaskHandler&> FindTask(uint64_t task_id) = 0;
};

class AgentService {
 public:
  virtual ~AgentService() noexcept(false) = default;
  // Serves until the agent stops. A rejection is logged; the agent goes on.
  // The promise owns everything the service keeps on the loop (connections,
  // streams, timers): the agent drops it on the loop thread, but destroys
  // the service itself later, on its owner's thread, after the loop closed.
  virtual kj::Promise<void> Run(AgentEnvironment& environment) = 0;
};

}  // namespace dispatch::clients
