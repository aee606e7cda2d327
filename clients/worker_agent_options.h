// WorkerAgentOptions: how a WorkerAgent finds the dispatcher, presents itself,
// and paces heartbeats, reconnects and split fetches. Plain data, validated
// once by WorkerAgent::Start().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace dispatch::clients {

struct WorkerAgentOptions {
  // "tcp:HOST:PORT" or "unix:PATH", or a comma-separated list of them (an HA
  // group: the client finds the leader, clients/dispatcher_addresses.h).
  std::string dispatcher_address;
  std::string token;               // presented at the gateway
  // The worker's identity across reconnects and dispatcher restarts: the same
  // address is the same worker. Unique per worker.
  std::string worker_address;
  std::string transfer_address;  // where consumers read; empty: worker_address
  std::vector<std::string> tags;
  uint32_t heartbeat_interval_ms = 1000;  // the dispatcher may ask for less
  uint32_t heartbeat_timeout_ms = 0;      // 0: max(10 intervals, 10 s); past it the link is dropped
  uint32_t connect_timeout_ms = 5000;
  uint32_t backoff_initial_ms = 100;  // first reconnect delay (jittered in [d/2, d])
  uint32_t backoff_max_ms = 5000;
  uint32_t split_batch = 16;  // splits asked for per getSplit call
  // The sequence number of each task's first getSplit. A process that takes
  // over a dead worker's address (and its tasks) must start above the dead
  // one's last sequence: dispatch-worker uses the wall clock in microseconds.
  uint64_t first_split_sequence = 1;
  uint64_t seed = 0;  // jitter and worker incarnation; 0: random
  // Closures (issue 5): slots and function names announced in every
  // heartbeat. 0 / empty until a closure runner exists.
  uint32_t max_closures = 0;
  std::vector<std::string> functions;
  // The dataset kinds this worker produces, announced in every heartbeat: the
  // dispatcher gives it tasks only of datasets of these kinds. Empty: it
  // announces none and is given a task of every job (WorkerAssembly fills it
  // from its DatasetKindRegistry).
  std::vector<std::string> dataset_kinds;
};

// InvalidArgument naming the first bad field; ok otherwise.
Status ValidateWorkerAgentOptions(const WorkerAgentOptions& options);

}  // namespace dispatch::clients
