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
  auto sent = request.send();
  c.last_replies.erase(worker);
  return sent.then([&c, worker](capnp::Response<rpc::Dispatcher::WorkerHeartbeatResults> reply) {
    c.last_replies.insert_or_assign(worker, kj::mv(reply));
  });
}

}  // namespace dispatch::bench
