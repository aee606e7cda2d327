// What the simulated actors and the simulated dispatcher say to each other:
// plain values standing for the RPCs of schema/dispatcher.capnp (only the
// fields the decisions read). A reply is a callback the dispatcher parks until
// its pass commits, then sends on the caller's connection.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/checksum.h"
#include "common/status.h"
#include "state/closure_planner.h"
#include "state/records.h"

namespace dispatch::sim {

// A closure pushed to a worker (runClosures).
struct RunPush {
  uint64_t closure_id = 0;
  uint64_t worker_id = 0;
  uint32_t attempt = 0;
  std::string function;
  std::string args;
  std::vector<std::string> inputs = {};  // the input closures' results, in order
  bool cancel = false;  // WorkerControl.cancelClosures: drop this run (best effort)
};

// What every simulated function returns: its args, and a digest of its
// inputs' results in order (so a result pushed wrong, or in the wrong order,
// shows in the dependant's result).
inline std::string ClosureResult(const std::string& args, const std::vector<std::string>& inputs) {
  std::string out = "r:" + args;
  if (inputs.empty()) return out;
  uint32_t crc = 0;
  for (const std::string& input : inputs) {
    crc = Crc32cExtend(crc, input.data(), input.size());
    crc = Crc32cExtend(crc, "|", 1);
  }
  return out + "|" + std::to_string(crc);
}

struct ClosureReport {
  enum class Kind { kResult, kUserError, kTransientError, kUnavailable };
  uint64_t closure_id = 0;
  uint32_t attempt = 0;
  Kind kind = Kind::kResult;
  std::string payload;  // the result, or the error's text
};

struct HeartbeatRequest {
  std::string address;
  uint64_t incarnation = 0;  // the worker process
  uint32_t slots = 0;
  std::shared_ptr<const state::FunctionSet> functions;
  std::vector<uint64_t> current_tasks;
  // The worker's WorkerControl capability: where closures are pushed.
  std::function<void(const std::vector<RunPush>&)> control;
};

struct TaskInfo {
  uint64_t task_id = 0;
  uint64_t job_id = 0;
  bool dynamic = false;
  int64_t repetitions = 1;  // the dataset's, for a DYNAMIC task
};

struct HeartbeatReply {
  uint64_t worker_id = 0;
  uint64_t dispatcher_incarnation = 0;
  std::vector<TaskInfo> new_tasks;
  std::vector<uint64_t> tasks_to_delete;
};

struct SplitRequest {
  uint64_t task_id = 0;
  uint64_t sequence = 0;
  int64_t repetition = 0;
  uint32_t max_splits = 1;
};

struct SplitReply {
  Status status;
  int64_t repetition = 0;
  bool end_of_splits = false;
  std::vector<uint64_t> indices;
  bool operator==(const SplitReply&) const = default;
};

// One closure of a schedule call.
struct ClosureSpec {
  uint64_t request_id = 0;
  std::string function;
  std::string args;
  int32_t priority = 0;
  uint32_t timeout_ms = 0;
  std::vector<uint64_t> inputs;  // closure ids, or state::kInputInCall + an earlier index
  // The coordinator's own: the request id of the first spec of the call it
  // was made in (an in-call input names that call's specs by position).
  uint64_t call_first_request = 0;
};

struct CancelReply {
  Status status;
  std::vector<state::ClosureState> states;  // per asked id
};

struct ScheduleReply {
  Status status;
  std::vector<uint64_t> ids;  // per spec
  bool raised_error = false;  // the coordinator's first error came instead
  uint64_t error_closure = 0;
};

// An outcome as awaitResults reports it.
struct Outcome {
  uint64_t closure_id = 0;
  state::ClosureState state = state::ClosureState::QUEUED;
  std::string result;  // finished: read back from the result table
  std::string error;   // failed
  bool operator==(const Outcome&) const = default;
};

struct JoinReply {
  bool raised_error = false;
  uint64_t unfinished = 0;
};

struct JobRequest {
  uint64_t dataset_id = 0;
  std::string name;  // empty: anonymous
  bool dynamic = false;
  bool requeue = false;
  uint32_t num_consumers = 0;  // round robin when > 0
};

struct JobReply {
  Status status;
  uint64_t job_id = 0;
  uint64_t job_client_id = 0;
};

struct ClientHeartbeatRequest {
  uint64_t job_client_id = 0;
  int64_t current_round = -1;  // a round-robin consumer's round; -1: none
  int64_t blocked_round = -1;  // the round it waits at for a pending task; -1: none
};

struct ClientHeartbeatReply {
  Status status;
  bool job_finished = false;
  int64_t block_round = -1;  // where a pending task is to start; -1: none pending
  std::vector<std::pair<uint64_t, int64_t>> tasks;  // (task, starting round), by id
};

}  // namespace dispatch::sim
