#include "clients/blocking_dataset_client.h"

#include "clients/dispatcher_connection.h"
#include "clients/loop_thread.h"
#include "common/rpc_status.h"

namespace dispatch::clients {
namespace {

class NoBody final : public LoopThread::Body {};

// Runs `call` on a connection to the endpoint, on a loop of its own, and
// waits for its answer (or the endpoint's timeout).
template <typename T>
Result<T> CallAndWait(
    const DispatcherEndpoint& endpoint,
    std::function<kj::Promise<T>(rpc::Dispatcher::Client dispatcher)> call) {
  LoopThread loop("dataset client");
  UvAsyncIo* io = nullptr;
  DISPATCH_RETURN_IF_ERROR(loop.Start([&io](UvAsyncIo& loop_io) -> kj::Own<LoopThread::Body> {
    io = &loop_io;
    return kj::heap<NoBody>();
  }));
  Result<T> answer = loop.RunAndWait<T>([&]() -> kj::Promise<T> {
    kj::Promise<T> answered =
        DispatcherConnection::Connect(io->network(), endpoint.address, endpoint.token)
            .then([call](kj::Own<DispatcherConnection> connection) {
              // The connection lives until the call's answer is in.
              auto dispatcher = connection->dispatcher();
              return call(kj::mv(dispatcher)).attach(kj::mv(connection));
            });
    kj::Promise<T> late =
        io->timer().afterDelay(endpoint.timeout.count() * kj::MILLISECONDS).then([&endpoint]() -> T {
          ThrowStatus(UnavailableError("the dispatcher at " + endpoint.address +
                                       " did not answer within " +
                                       std::to_string(endpoint.timeout.count()) + " ms"));
        });
    return answered.exclusiveJoin(kj::mv(late));
  });
  loop.Stop();
  return answer;
}

}  // namespace

Result<RegisteredDataset> RegisterDatasetAndWait(const DispatcherEndpoint& endpoint,
                                                 const DatasetSpec& spec) {
  return CallAndWait<RegisteredDataset>(endpoint, [spec](rpc::Dispatcher::Client dispatcher) {
    return RegisterDataset(kj::mv(dispatcher), spec);
  });
}

Result<std::string> GetElementSpecAndWait(const DispatcherEndpoint& endpoint,
                                          uint64_t dataset_id) {
  return CallAndWait<std::string>(endpoint, [dataset_id](rpc::Dispatcher::Client dispatcher) {
    auto request = dispatcher.getElementSpecRequest();
    request.setDatasetId(dataset_id);
    return request.send().then([](auto reply) {
      auto spec = reply.getElementSpec();
      return std::string(reinterpret_cast<const char*>(spec.begin()), spec.size());
    });
  });
}

}  // namespace dispatch::clients
