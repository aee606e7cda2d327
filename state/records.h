// The records DispatcherState holds: plain values, copied out of Updates on
// Apply and into StateSnapshots on WriteSnapshot. Ids are nonzero and never
// reused; 0 means "none". Cross references are by id (or worker address) and
// are kept valid by DispatcherState::Check, never by these structs themselves.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "schema/journal.capnp.h"

namespace dispatch::state {

using rpc::ClosureState;
using rpc::ProcessingMode;
using rpc::TargetWorkers;

// "OFF", "DYNAMIC", ...: for error messages and tools.
const char* ProcessingModeName(ProcessingMode mode);
const char* TargetWorkersName(TargetWorkers target);
const char* ClosureStateName(ClosureState state);
// Finished, failed or cancelled: the closure holds its outcome until released.
inline bool IsClosureDone(ClosureState state) {
  return state == ClosureState::FINISHED || state == ClosureState::FAILED ||
         state == ClosureState::CANCELLED;
}

// ClosureState's values are 0 .. kClosureStateCount - 1 (a test checks the
// schema agrees), so per-state tallies can be arrays.
inline constexpr size_t kClosureStateCount = 6;
inline size_t ClosureStateSlot(ClosureState state) { return static_cast<size_t>(state); }

struct Dataset {
  uint64_t id = 0;
  uint64_t fingerprint = 0;
  std::string metadata;
  std::string definition_key;  // where storage keeps the definition bytes
  std::optional<std::string> element_spec;
  int64_t registered_micros = 0;
  std::string kind;  // the first word of its definition; empty: none, every worker serves it
};

struct Worker {
  uint64_t id = 0;
  std::string address;
  std::string transfer_address;
  std::vector<std::string> tags;
  uint64_t incarnation = 0;
  int64_t registered_micros = 0;
  // The dataset kinds it produces; empty: it announced none and serves every job.
  std::set<std::string, std::less<>> dataset_kinds;
};

struct NamedJobKey {
  std::string name;
  int64_t index = 0;
  auto operator<=>(const NamedJobKey&) const = default;
};

// Most split providers a DYNAMIC job may have: far beyond any real dataset;
// a record or a snapshot with more is refused before anything is allocated.
inline constexpr uint32_t kMaxSplitProviders = 4096;

// Where one split provider of a DYNAMIC job stands.
struct SplitProviderProgress {
  int64_t repetition = 0;         // the repetition splits are handed out for now
  uint64_t next_index = 0;        // the next fresh split index of that repetition
  std::deque<uint64_t> requeued;  // splits of a dead worker, handed out first
};

// A round-robin task that consumers have not all accepted yet.
struct PendingTask {
  uint64_t task_id = 0;
  int64_t target_round = 0;
  int64_t failures = 0;
  std::set<uint64_t> ready_clients;
};

struct Job {
  uint64_t id = 0;
  uint64_t dataset_id = 0;
  ProcessingMode processing_mode = ProcessingMode::OFF;
  std::optional<NamedJobKey> named_key;
  uint32_t num_consumers = 0;  // 0: not round robin
  TargetWorkers target_workers = TargetWorkers::AUTO;
  bool requeue_unfinished_splits = false;
  std::vector<SplitProviderProgress> providers;  // non-empty iff DYNAMIC
  int64_t num_clients = 0;
  int64_t last_client_released_micros = -1;  // -1: no client released yet
  bool garbage_collected = false;
  bool finished = false;
  int64_t created_micros = 0;
  std::deque<PendingTask> pending_tasks;  // front first

  bool IsRoundRobin() const { return num_consumers > 0; }
  bool IsDynamic() const { return processing_mode == ProcessingMode::DYNAMIC; }
};

struct Task {
  uint64_t id = 0;
  uint64_t job_id = 0;
  std::string worker_address;
  std::string transfer_address;
  int64_t starting_round = 0;
  bool pending = false;  // waiting in its job's pending queue
  bool finished = false;
};

struct JobClient {
  uint64_t id = 0;
  uint64_t job_id = 0;
  int64_t acquired_micros = 0;
};

// The last answer to one requester (task, split provider): a retry with the
// same sequence gets it again.
struct SplitGrant {
  uint64_t sequence = 0;
  int64_t repetition = 0;
  std::vector<uint64_t> split_indices;
  bool end_of_splits = false;
  bool outstanding = false;  // the splits are held by the task, not yet consumed
};

struct SplitRequester {
  uint64_t task_id = 0;
  uint32_t provider_index = 0;
  auto operator<=>(const SplitRequester&) const = default;
};

struct Closure {
  uint64_t id = 0;
  uint64_t coordinator_id = 0;
  uint64_t request_id = 0;  // the coordinator's idempotency key; 0: none
  std::string function_name;
  std::string args;
  ClosureState state = ClosureState::QUEUED;
  uint64_t worker_id = 0;       // when assigned: the worker running it
  uint32_t attempts = 0;        // assignments so far
  uint64_t queue_position = 0;  // when queued: its place in the global FIFO
  // When finished: the result's bytes in `result` (inline, from records
  // written before results were stored apart), or, with `result_stored`, only
  // their size and CRC32C: the bytes are in storage's result table.
  std::string result;
  bool result_stored = false;
  uint64_t result_size = 0;
  uint32_t result_crc = 0;
  std::string error;            // when failed
  bool user_error = false;
  int64_t scheduled_micros = 0;
  int64_t done_micros = 0;  // when finished, failed or cancelled
  std::vector<uint64_t> resources;  // per-worker resources the function receives
  uint32_t transient_failures = 0;  // put back because the worker called the error transient
  int32_t priority = 0;             // higher is assigned first (FIFO within a priority)
  int64_t deadline_micros = 0;      // past it the closure fails (DeadlineExceeded); 0: none
  // Closures whose results the function receives, in order (kept until this
  // one is released). While one is not finished, this closure is WAITING.
  std::vector<uint64_t> inputs;
};

// What a closure needs of a worker: its function, and its per-worker
// resources (each built by a function of its own). The same workers can run
// every closure of one kind.
struct ClosureKind {
  std::string function;
  std::vector<uint64_t> resources;
  bool operator==(const ClosureKind&) const = default;
};

// Orders kinds, and finds a closure's kind without copying it into one.
struct ClosureKindLess {
  using is_transparent = void;
  bool operator()(const ClosureKind& a, const ClosureKind& b) const {
    return Less(a.function, a.resources, b.function, b.resources);
  }
  bool operator()(const ClosureKind& a, const Closure& b) const {
    return Less(a.function, a.resources, b.function_name, b.resources);
  }
  bool operator()(const Closure& a, const ClosureKind& b) const {
    return Less(a.function_name, a.resources, b.function, b.resources);
  }
  static bool Less(std::string_view fa, const std::vector<uint64_t>& ra, std::string_view fb,
                   const std::vector<uint64_t>& rb) {
    const int c = fa.compare(fb);
    return c != 0 ? c < 0 : ra < rb;
  }
};

// A queued closure's place: higher priority first, then queue position (FIFO
// within a priority).
struct QueueKey {
  int32_t priority = 0;
  uint64_t position = 0;
  bool operator==(const QueueKey&) const = default;
  bool operator<(const QueueKey& other) const {
    if (priority != other.priority) return priority > other.priority;
    return position < other.position;
  }
};

// Queued closures by kind: kind -> (place in the queue -> closure id). Each
// kind's queue is ordered, so taking its front is O(log n).
using KindQueue = std::map<QueueKey, uint64_t>;
using ClosureQueues = std::map<ClosureKind, KindQueue, ClosureKindLess>;

// A per-worker resource: every worker process builds its own component by
// running `function_name(args)` before the first closure that uses it.
struct PerWorkerResource {
  uint64_t id = 0;
  uint64_t coordinator_id = 0;
  std::string function_name;
  std::string args;
  uint64_t request_id = 0;  // the coordinator's idempotency key; 0: none

  bool operator==(const PerWorkerResource&) const = default;
};

// A coordinator's first error, held until raised once (CoordinatorErrorCleared).
struct CoordinatorError {
  uint64_t closure_id = 0;
  std::string error;
};

}  // namespace dispatch::state
