// dispatch-baseline-server: the same Gateway/Dispatcher interface served on
// Cap'n Proto's own event loop (capnp::EzRpcServer, KJ's epoll port). It is
// the yardstick `dispatch-bench ping` holds the libuv-driven dispatcher to.
// It mirrors the dispatcher's per-call work (ping echo) and its 100 ms
// housekeeping tick, and nothing else. It also answers worker heartbeats
// with no tasks, holding each worker's control capability as a server that
// remembers its workers must: the floor `dispatch-bench dataservice` holds
// the dispatcher's CPU per heartbeat to.
#include <stdio.h>

#include <string>
#include <unordered_map>

#include <capnp/ez-rpc.h>
#include <kj/async.h>
#include <kj/async-io.h>
#include <kj/debug.h>
#include <kj/timer.h>

#include "schema/dispatcher.capnp.h"

namespace {

using dispatch::rpc::Dispatcher;
using dispatch::rpc::Gateway;

class BaselineDispatcher final : public Dispatcher::Server {
 public:
  kj::Promise<void> getVersion(GetVersionContext context) override {
    auto version = context.getResults().initVersion();
    version.setProtocol(1);
    version.setBuild("baseline");
    version.setIncarnation(1);
    return kj::READY_NOW;
  }
  kj::Promise<void> ping(PingContext context) override {
    context.getResults().setPayload(context.getParams().getPayload());
    return kj::READY_NOW;
  }
  kj::Promise<void> getServerStats(GetServerStatsContext context) override {
    context.getResults().initStats();
    return kj::READY_NOW;
  }
  kj::Promise<void> workerHeartbeat(WorkerHeartbeatContext context) override {
    auto request = context.getParams().getRequest();
    // Holding the capability keeps Cap'n Proto from sending a Release for
    // each heartbeat, as the dispatcher's registry does.
    workers_.insert_or_assign(std::string(request.getAddress().cStr()), request.getControl());
    context.getResults().initResponse();
    return kj::READY_NOW;
  }

 private:
  std::unordered_map<std::string, dispatch::rpc::WorkerControl::Client> workers_;
};

class BaselineGateway final : public Gateway::Server {
 public:
  kj::Promise<void> authenticate(AuthenticateContext context) override {
    context.getResults().setDispatcher(kj::heap<BaselineDispatcher>());
    return kj::READY_NOW;
  }
};

kj::Promise<void> Tick(kj::Timer& timer, uint64_t& ticks) {
  return timer.afterDelay(100 * kj::MILLISECONDS).then([&timer, &ticks]() {
    ++ticks;
    return Tick(timer, ticks);
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = argc > 1 ? argv[1] : "127.0.0.1";
  capnp::EzRpcServer server(kj::heap<BaselineGateway>(), host.c_str(), 0);
  auto& wait_scope = server.getWaitScope();
  uint port = server.getPort().wait(wait_scope);
  printf("baseline listening on tcp:%s:%u\n", host.c_str(), port);
  fflush(stdout);
  uint64_t ticks = 0;
  Tick(server.getIoProvider().getTimer(), ticks).wait(wait_scope);
  return 0;
}
