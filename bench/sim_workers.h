// Simulated workers for the benches that need many of them registered
// (dataservice, metrics): one connection carries many workers' heartbeats,
// and a worker never runs anything.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <unordered_map>

#include "clients/dispatcher_connection.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::bench {

// Answers every push; the simulated workers never run anything.
class NullControl final : public rpc::WorkerControl::Server {
 public:
  kj::Promise<void> startTasks(StartTasksContext) override { return kj::READY_NOW; }
  kj::Promise<void> deleteTasks(DeleteTasksContext) override { return kj::READY_NOW; }
};

struct SimConnection {
  kj::Own<clients::DispatcherConnection> conn;
  rpc::WorkerControl::Client control = kj::heap<NullControl>();
  // Each worker's last reply, held until its next heartbeat as AgentLink
  // holds it (the Finish goes out with the next call). Destroyed before conn.
  std::unordered_map<uint64_t, capnp::Response<rpc::Dispatcher::WorkerHeartbeatResults>>
      last_replies;
};

// One heartbeat of simulated worker `worker` (address "sim-worker-N",
// incarnation N + 1, no tasks) over `c`, with the control capability as the
// real WorkerAgent sends with every heartbeat; `max_closures` slots. Like the
// agent, it releases the worker's previous reply only once this call is sent.
kj::Promise<void> SendSimHeartbeat(SimConnection& c, uint64_t worker, uint32_t max_closures = 0);

}  // namespace dispatch::bench
