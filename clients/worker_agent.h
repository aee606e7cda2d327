// WorkerAgent: the library a worker process embeds. It runs on its OWN thread
// with its own libuv loop: it connects to the dispatcher, registers with its
// WorkerControl capability, heartbeats, runs one TaskHandler per assigned task,
// fetches splits, reports completion, runs the closures the dispatcher pushes
// (functions registered by name, on executor threads), and reconnects with
// jittered backoff.
// Threading contract: every public method may be called from any thread and
// returns without waiting for the network; the factory, the handlers and
// functions given to Post() run on the agent thread, never concurrently.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "clients/agent_service.h"
#include "clients/agent_status.h"
#include "clients/closure_function.h"
#include "clients/task_handler.h"
#include "clients/worker_agent_options.h"
#include "common/status.h"
#include "clients/loop_thread.h"

namespace dispatch::clients {

class WorkerAgent {
 public:
  WorkerAgent(WorkerAgentOptions options, std::unique_ptr<TaskHandlerFactory> factory);
  // Stops the agent if it is running.
  ~WorkerAgent();
  WorkerAgent(const WorkerAgent&) = delete;
  WorkerAgent& operator=(const WorkerAgent&) = delete;

  // Validates the options and starts the agent thread. Returns once that
  // thread's loop is up (no network wait): connecting happens in the
  // background. InvalidArgument for bad options; FailedPrecondition if
  // started twice.
  Status Start();
  // Cancels every task, closes the connection and joins the agent thread.
  // Waits only for that local teardown. Idempotent.
  // REQUIRES: not on the agent thread.
  void Stop();

  // A copy of the latest status.
  WorkerAgentStatus status() const { return board_.Snapshot(); }
  // Blocks the caller (its choice) until `condition` holds or `timeout`.
  bool WaitFor(const std::function<bool(const WorkerAgentStatus&)>& condition,
               std::chrono::milliseconds timeout) const {
    return board_.WaitFor(condition, timeout);
  }

  // Called on the agent thread after every status change.
  // REQUIRES: before Start().
  void SetStatusListener(std::function<void(const WorkerAgentStatus&)> listener) {
    board_.SetListener(std::move(listener));
  }

  // Adds a service to run on the agent loop. REQUIRES: before Start().
  void AddService(std::unique_ptr<AgentService> service) {
    services_.push_back(std::move(service));
  }

  // Adds a closure function the dispatcher may push closures of; its name
  // goes into every heartbeat. Closures run only when options.max_closures
  // > 0. Stop() waits for functions still running (ClosureCall::SleepFor and
  // stopping() let them end early). InvalidArgument for an empty name or
  // function, AlreadyExists for a name registered twice. REQUIRES: before
  // Start() (FailedPrecondition after).
  Status RegisterFunction(std::string name, ClosureFunction function,
                          ClosureFunctionOptions function_options = {});

  // Asks for a heartbeat now instead of at the next interval.
  void HeartbeatNow();
  // Runs `function` on the agent thread soon. Returns false (and drops it)
  // when the agent is not running.
  bool Post(std::function<void()> function);

  const WorkerAgentOptions& options() const { return options_; }

 private:
  class Runner;  // the agent thread's objects

  WorkerAgentOptions options_;  // fixed once started (RegisterFunction adds names)
  std::unique_ptr<TaskHandlerFactory> factory_;
  FunctionRegistry functions_;  // fixed once started; read by the agent and executor threads
  std::vector<std::unique_ptr<AgentService>> services_;
  StatusBoard board_;
  // Orders RegisterFunction() and Start(): functions_ and options_.functions
  // change only before the agent thread exists.
  std::mutex mu_;
  // Agent thread only: set by the setup, valid in every posted function
  // (none runs after the Runner is gone).
  Runner* runner_ = nullptr;
  LoopThread loop_thread_{"worker agent"};  // declared last: stopped first
};

}  // namespace dispatch::clients
