#include "bench/sim_workers.h"

#include <string>

namespace dispatch::bench {

kj::Promise<void> SendSimHeartbeat(SimConnection& c, uint64_t worker, uint32_t max_closures) {
  auto request = c.conn->dispatcher().workerHeartbeatRequest();
  auto body = request.initRequest();
  std::string address = "sim-worker-" + std::to_string(worker);
  body.setAddress(address);
  body.setTransferAddress(address + "/transfer");
  body.setWorkerIncarnation(worker + 1);
  body.setControl(c.control);
  body.setMaxClosures(max_closures);
  body.initCurrentTasks(0);
  return request.send().ignoreResult();
}

}  // namespace dispatch::bench
