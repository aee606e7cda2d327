// WorkerAssembly: a whole worker as `dispatch-worker` runs one: a WorkerAgent
// whose tasks produce elements from a set of dataset kinds, the
// TransferServer consumers read them from, and the closure functions
// registered on the agent. Shared by dispatch-worker and the Python package's
// Worker, so that both bind port 0, start and stop alike.
// Threading: Create(), Start() and Stop() from one owner thread; agent() is
// the WorkerAgent, with its own threading contract.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "clients/dataset_kind.h"
#include "clients/task_producer.h"
#include "clients/transfer_server.h"
#include "clients/worker_agent.h"
#include "common/status.h"

namespace dispatch::clients {

struct WorkerAssemblyOptions {
  WorkerAgentOptions agent;
  ProducerLimits producer;
  TransferServerOptions transfer;
  // Produce nothing: read a task's splits, then hold it until it is deleted.
  bool hold_tasks = false;
};

class WorkerAssembly {
 public:
  // Validates the options (InvalidArgument naming the bad one) and, for an
  // address with port 0, binds it now, so the agent registers with the port
  // the kernel picked (Unavailable when it cannot listen).
  static Result<std::unique_ptr<WorkerAssembly>> Create(WorkerAssemblyOptions options,
                                                        DatasetKindRegistry kinds);

  // Stop().
  ~WorkerAssembly();
  WorkerAssembly(const WorkerAssembly&) = delete;
  WorkerAssembly& operator=(const WorkerAssembly&) = delete;

  // Register closure functions and set a status listener here before Start().
  WorkerAgent& agent() { return *agent_; }

  // Starts the agent and waits up to `timeout` until the transfer server
  // listens: its error, or Unavailable when it did not in time (the agent is
  // stopped again either way).
  Status Start(std::chrono::milliseconds timeout);

  // Cancels the tasks, waits for running closure functions, closes the
  // connections. Idempotent.
  void Stop();

  // The addresses the agent registers with (bound ones for port 0).
  const std::string& worker_address() const { return agent_->options().worker_address; }
  const std::string& transfer_address() const { return agent_->options().transfer_address; }

 private:
  WorkerAssembly(WorkerAssemblyOptions options, DatasetKindRegistry kinds);

  const DatasetKindRegistry kinds_;  // read by the agent thread's producers
  // Agent thread only, outlives the agent: keeps up to one task's buffer of
  // sent elements' memory for the next elements, of any task.
  ProducerDirectory producers_;
  TransferServer* transfer_ = nullptr;  // owned by the agent
  Status bound_error_;  // from binding port 0 in the constructor
  std::unique_ptr<WorkerAgent> agent_;  // declared last: stopped first
};

}  // namespace dispatch::clients
