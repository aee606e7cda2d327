// WorkerAgentStatus and StatusBoard: what a WorkerAgent tells its embedding
// program. The agent thread publishes a fresh copy after every change; any
// thread reads a snapshot or waits for a condition on it. The board's mutex is
// held only to copy the struct, never across I/O, so reading it never blocks
// on the network.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace dispatch::clients {

struct WorkerAgentStatus {
  bool running = false;     // the agent thread is up
  bool connected = false;   // a live, authenticated connection
  bool registered = false;  // the dispatcher answered a heartbeat on that connection
  uint64_t worker_id = 0;   // the dispatcher's id for this worker's address; 0 before
  uint64_t dispatcher_incarnation = 0;
  uint64_t worker_incarnation = 0;   // ours, random per agent start
  uint64_t connects = 0;             // connections established
  uint64_t connect_failures = 0;     // attempts that failed or ended a session
  uint64_t registrations = 0;        // sessions on which the dispatcher accepted us
  uint64_t dispatcher_restarts = 0;  // incarnation changes seen
  uint64_t heartbeats = 0;           // heartbeats answered
  uint64_t pushes_received = 0;      // startTasks/deleteTasks calls from the dispatcher
  uint64_t tasks_started = 0;
  uint64_t tasks_completed = 0;       // handlers that finished
  uint64_t completions_reported = 0;  // acknowledged by workerUpdate
  uint64_t tasks_failed = 0;
  uint64_t split_retries = 0;  // getSplit calls repeated with the same sequence
  // Closures (issue 5).
  uint64_t closures_received = 0;        // assignments pushed by runClosures
  uint64_t closures_run = 0;             // outcomes produced (results and errors)
  uint64_t closures_cancelled = 0;       // held here when cancelClosures named them
  uint64_t closures_dropped = 0;         // of those, dropped before they started
  uint64_t closure_report_calls = 0;     // reportClosures calls acknowledged
  uint64_t closure_reports_sent = 0;     // outcomes in those calls
  uint64_t closure_reports_ignored = 0;  // of which the dispatcher ignored (stale)
  uint64_t closure_reports_dropped = 0;  // not reported: their connection had ended
  uint64_t closure_results_over_limit = 0;  // results over the dispatcher's limit, sent as errors
  uint64_t closure_report_splits = 0;    // report batches split to fit the result byte limit
  uint64_t resources_built = 0;          // per-worker resource components built
  std::vector<uint64_t> tasks;           // task ids the agent holds, sorted
  std::string last_error;                // the latest connection or call failure
};

class StatusBoard {
 public:
  // Applies `change` to the status and wakes every waiter. Agent thread.
  void Update(const std::function<void(WorkerAgentStatus&)>& change);
  // Any thread.
  WorkerAgentStatus Snapshot() const;
  // Called after every Update, on the updating thread, without the lock held.
  // REQUIRES: set before the agent starts.
  void SetListener(std::function<void(const WorkerAgentStatus&)> listener) {
    listener_ = std::move(listener);
  }
  // Blocks the caller (by its own choice) until `condition` holds or
  // `timeout` passes; returns whether it held.
  bool WaitFor(const std::function<bool(const WorkerAgentStatus&)>& condition,
               std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  WorkerAgentStatus status_;
  std::function<void(const WorkerAgentStatus&)> listener_;
};

}  // namespace dispatch::clients
