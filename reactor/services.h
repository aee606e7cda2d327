// The Dispatcher of one connection, which the gateway (frontend.h) hands out
// once the peer authenticated. It is thin: it checks the loop thread,
// brackets every call for the in-flight limit, and turns each request into
// work on the DispatcherServer.
#pragma once

#include "reactor/rpc_server.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::reactor {

class DispatcherServer;
class DataService;

class DispatcherService final : public rpc::Dispatcher::Server {
 public:
  DispatcherService(DispatcherServer& server, RpcServer::ConnectionId connection)
      : server_(server), connection_(connection) {}

  DispatchCallResult dispatchCall(uint64_t interface_id, uint16_t method_id,
                                  capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) override;

  kj::Promise<void> getVersion(GetVersionContext context) override;
  kj::Promise<void> ping(PingContext context) override;
  kj::Promise<void> getServerStats(GetServerStatsContext context) override;

  // Data service (DataService holds what they share). Each one validates,
  // submits its Updates, fills its results and returns DurableState::Barrier():
  // the reply leaves only after the pass's group commit.
  // dataset_service.cc
  kj::Promise<void> getOrRegisterDataset(GetOrRegisterDatasetContext context) override;
  kj::Promise<void> getDatasetDef(GetDatasetDefContext context) override;
  kj::Promise<void> getElementSpec(GetElementSpecContext context) override;
  // job_service.cc
  kj::Promise<void> getOrCreateJob(GetOrCreateJobContext context) override;
  kj::Promise<void> clientHeartbeat(ClientHeartbeatContext context) override;
  kj::Promise<void> releaseJobClient(ReleaseJobClientContext context) override;
  kj::Promise<void> maybeRemoveTask(MaybeRemoveTaskContext context) override;
  // split_service.cc
  kj::Promise<void> getSplit(GetSplitContext context) override;
  // worker_service.cc
  kj::Promise<void> workerHeartbeat(WorkerHeartbeatContext context) override;
  kj::Promise<void> workerUpdate(WorkerUpdateContext context) override;
  // listing_service.cc
  kj::Promise<void> getWorkers(GetWorkersContext context) override;
  kj::Promise<void> listDatasets(ListDatasetsContext context) override;
  kj::Promise<void> listJobs(ListJobsContext context) override;
  kj::Promise<void> getJob(GetJobContext context) override;
  kj::Promise<void> listTasks(ListTasksContext context) override;
  kj::Promise<void> listJobClients(ListJobClientsContext context) override;
  // closure_service.cc
  kj::Promise<void> openCoordinator(OpenCoordinatorContext context) override;
  kj::Promise<void> reportClosures(ReportClosuresContext context) override;
  kj::Promise<void> getClosureStats(GetClosureStatsContext context) override;
  kj::Promise<void> cancelCoordinator(CancelCoordinatorContext context) override;
  // backup_service.cc
  kj::Promise<void> backup(BackupContext context) override;

 private:
  DataService& data();

  DispatcherServer& server_;
  const RpcServer::ConnectionId connection_;
};

}  // namespace dispatch::reactor
