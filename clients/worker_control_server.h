// WorkerControlServer: the WorkerControl capability a WorkerAgent hands the
// dispatcher in its heartbeats. Pushed tasks go to the same TaskTable as tasks
// in heartbeat replies (both idempotent); pushed closures go to the
// ClosureRunner (the reply only acknowledges receipt). Runs on the agent
// thread; after Detach() (the agent is stopping) every call fails as
// DISCONNECTED.
#pragma once

#include "clients/agent_link.h"
#include "clients/agent_status.h"
#include "clients/closure_runner.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

class WorkerControlServer final : public rpc::WorkerControl::Server {
 public:
  WorkerControlServer(AgentLink::Delegate& tasks, ClosureRunner& closures, StatusBoard& board)
      : tasks_(&tasks), closures_(&closures), board_(board) {}
  void Detach() {
    tasks_ = nullptr;
    closures_ = nullptr;
  }

 protected:
  kj::Promise<void> startTasks(StartTasksContext context) override;
  kj::Promise<void> deleteTasks(DeleteTasksContext context) override;
  kj::Promise<void> runClosures(RunClosuresContext context) override;
  kj::Promise<void> cancelClosures(CancelClosuresContext context) override;

 private:
  AgentLink::Delegate* tasks_;
  ClosureRunner* closures_;
  StatusBoard& board_;
};

}  // namespace dispatch::clients
