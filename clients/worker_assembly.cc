#include "clients/worker_assembly.h"

#include "clients/split_reading_task.h"
#include "common/address.h"

namespace dispatch::clients {

Result<std::unique_ptr<WorkerAssembly>> WorkerAssembly::Create(WorkerAssemblyOptions options,
                                                               DatasetKindRegistry kinds) {
  DISPATCH_RETURN_IF_ERROR(ValidateWorkerAgentOptions(options.agent));
  // Port 0 is resolved by binding, and only the address the worker listens on
  // is bound: an identity alone with port 0 would be every such worker's.
  if (IsTcpPortZero(options.agent.worker_address) && !options.agent.transfer_address.empty()) {
    return InvalidArgumentError("worker address " + options.agent.worker_address +
                                " asks for a free port, which only the address the worker "
                                "listens on can have; give it a port, or no transfer address");
  }
  std::unique_ptr<WorkerAssembly> assembly(new WorkerAssembly(std::move(options), std::move(kinds)));
  DISPATCH_RETURN_IF_ERROR(assembly->bound_error_);
  return assembly;
}

WorkerAssembly::WorkerAssembly(WorkerAssemblyOptions options, DatasetKindRegistry kinds)
    : kinds_(std::move(kinds)), producers_(options.producer.max_buffered_bytes) {
  std::unique_ptr<TaskHandlerFactory> factory;
  // The dispatcher routes by these: a worker producing elements announces the
  // kinds it can open; one that holds tasks without producing announces none.
  if (!options.hold_tasks) options.agent.dataset_kinds = kinds_.kinds();
  if (options.hold_tasks) {
    factory = std::make_unique<SplitReadingFactory>(SplitReadingOptions{.hold = true});
  } else {
    factory = std::make_unique<ProducingTaskFactory>(kinds_, producers_, options.producer);
  }
  // With hold_tasks no task has a producer, so a consumer is only ever told
  // "not ready"; the server runs anyway, so that a worker's address is always
  // one it listens on (and port 0 means the same either way).
  auto transfer = std::make_unique<TransferServer>(producers_, options.transfer);
  transfer_ = transfer.get();
  std::string& listen = options.agent.transfer_address.empty() ? options.agent.worker_address
                                                                : options.agent.transfer_address;
  if (IsTcpPortZero(listen)) {
    Result<std::string> bound = transfer_->ListenOnFreePort(listen);
    if (bound.ok()) {
      listen = *bound;
    } else {
      bound_error_ = bound.status();
    }
  }
  agent_ = std::make_unique<WorkerAgent>(std::move(options.agent), std::move(factory));
  agent_->AddService(std::move(transfer));
}

WorkerAssembly::~WorkerAssembly() { Stop(); }

Status WorkerAssembly::Start(std::chrono::milliseconds timeout) {
  DISPATCH_RETURN_IF_ERROR(agent_->Start());
  std::optional<Status> listening = transfer_->WaitListening(timeout);
  if (listening.has_value() && listening->ok()) return Status::Ok();
  agent_->Stop();
  if (listening.has_value()) return *listening;
  return UnavailableError("the transfer server did not start listening at " +
                          transfer_->address());
}

void WorkerAssembly::Stop() { agent_->Stop(); }

}  // namespace dispatch::clients
