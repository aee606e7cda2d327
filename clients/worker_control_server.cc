#include "clients/worker_control_server.h"

#include <kj/debug.h>

namespace dispatch::clients {

kj::Promise<void> WorkerControlServer::startTasks(StartTasksContext context) {
  if (tasks_ == nullptr) return KJ_EXCEPTION(DISCONNECTED, "the worker is stopping");
  board_.Update([](WorkerAgentStatus& s) { ++s.pushes_received; });
  tasks_->OnTasksAssigned(context.getParams().getTasks());
  return kj::READY_NOW;
}

kj::Promise<void> WorkerControlServer::deleteTasks(DeleteTasksContext context) {
  if (tasks_ == nullptr) return KJ_EXCEPTION(DISCONNECTED, "the worker is stopping");
  board_.Update([](WorkerAgentStatus& s) { ++s.pushes_received; });
  tasks_->OnTasksToDelete(context.getParams().getTaskIds());
  return kj::READY_NOW;
}

kj::Promise<void> WorkerControlServer::runClosures(RunClosuresContext context) {
  if (closures_ == nullptr) return KJ_EXCEPTION(DISCONNECTED, "the worker is stopping");
  auto params = context.getParams();
  closures_->OnRunClosures(params.getClosures(), params.getResources());
  return kj::READY_NOW;
}

kj::Promise<void> WorkerControlServer::cancelClosures(CancelClosuresContext context) {
  if (closures_ == nullptr) return KJ_EXCEPTION(DISCONNECTED, "the worker is stopping");
  closures_->OnCancelClosures(context.getParams().getClosureIds());
  return kj::READY_NOW;
}

}  // namespace dispatch::clients
