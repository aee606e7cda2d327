// CoordinatorOptions: how a Coordinator finds the dispatcher, which
// coordinator it is, and how it batches. Plain data, validated by
// Coordinator::Create().
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "clients/remote_value.h"
#include "common/status.h"

namespace dispatch::clients {

using ResourceId = uint64_t;

// What one closure asks for beyond its function and args.
struct ScheduleOptions {
  // Per-worker resources the function receives: each is replaced by the
  // running worker's own component.
  std::vector<ResourceId> resources;
  // Higher runs first: of the queued closures a free worker can take, the
  // highest priority goes first, FIFO within a priority (ClosureSpec.priority).
  int32_t priority = 0;
  // Past this time from its schedule at the dispatcher, the closure fails
  // with DeadlineExceeded (ClosureSpec.timeoutMs). 0: none. At most
  // 4294967295 ms (the wire's UInt32), else Schedule() is InvalidArgument.
  std::chrono::milliseconds timeout{0};
  // Dependencies: closures of the same Coordinator whose results the
  // function receives, in order (ClosureCall::inputs). The closure runs once
  // they all finished; when one fails or is cancelled it fails, naming that
  // input. An input must not have been fetched before this Schedule (Fetch
  // releases it at the dispatcher): FailedPrecondition. Fetching it later,
  // or dropping it, is fine.
  std::vector<RemoteValue> inputs;
  // Ask for a per-stage timestamp trace of this closure (ClosureSpec.trace),
  // read with RemoteValue::Trace() after the outcome arrived: for benchmarks
  // and diagnosis (`dispatch-bench closures` prints its breakdown). Costs a
  // few clock reads and 96 bytes on the wire; the dispatcher traces at most
  // 4096 closures at a time.
  bool trace = false;
};

struct CoordinatorOptions {
  // "tcp:HOST:PORT" or "unix:PATH", or a comma-separated list of them (an HA
  // group: the client finds the leader, clients/dispatcher_addresses.h).
  std::string dispatcher_address;
  std::string token;               // presented at the gateway
  // The coordinator's closures live under this id at the dispatcher: a new
  // Coordinator opening the same id sees them (Attach, Join). 0: random.
  uint64_t coordinator_id = 0;
  // At most this many closures per schedule call, and this many schedule
  // calls in flight at once.
  uint32_t max_schedule_batch = 1024;
  uint32_t max_schedule_calls_in_flight = 4;
  // At most this many bytes of closures (function, args, 8 per resource) per
  // schedule call, and at least one closure: with the count above, each call
  // stays well under the dispatcher's --max-message-bytes (64 MiB).
  uint64_t max_schedule_bytes = 16u << 20;
  // Schedule() refuses at once (ResourceExhausted) a closure larger than
  // this: the dispatcher journals each closure within one record of 16 MiB
  // and would refuse it (and, sent in a batch, the closures batched with it).
  // REQUIRES: <= max_schedule_bytes.
  uint64_t max_closure_bytes = (16u << 20) - (64u << 10);
  // Closures scheduled but not yet acknowledged by the dispatcher (waiting to
  // be sent, or sent while the dispatcher applies back-pressure). Past this,
  // Schedule() waits: client memory stays bounded.
  uint32_t max_unacknowledged = 8192;
  uint32_t max_results_per_call = 0;  // awaitResults maxResults (0: all)
  // Each outcome is handed to the user once, even when a restarted
  // dispatcher reports it again: the ids of the latest this many
  // acknowledged releases are remembered for that (about 48 bytes each).
  // Counted in CoordinatorStatus (releases_remembered, releases_forgotten).
  uint64_t max_remembered_releases = 65536;
  // Create() gives up when the first session is not open by then.
  uint32_t connect_timeout_ms = 10000;
  uint32_t backoff_initial_ms = 20;
  uint32_t backoff_max_ms = 1000;
  // The coordinator id (when 0) and reconnect jitter; 0: random. Request
  // ids are always random: they must differ across processes.
  uint64_t seed = 0;
};

// InvalidArgument naming the first bad field; ok otherwise.
Status ValidateCoordinatorOptions(const CoordinatorOptions& options);

}  // namespace dispatch::clients
