#include "clients/dispatcher_connection.h"

#include "common/address.h"
#include "common/rpc_status.h"

namespace dispatch::clients {
DispatcherConnection::DispatcherConnection(kj::Own<kj::AsyncIoStream> stream)
    : stream_(kj::mv(stream)),
      client_(*stream_),
      gateway_(client_.bootstrap().castAs<rpc::Gateway>()),
      dispatcher_(nullptr) {}

kj::Promise<kj::Own<DispatcherConnection>> DispatcherConnection::Connect(kj::Network& network,
                                                                         kj::StringPtr address,
                                                                         kj::StringPtr token) {
  Result<std::string> kj_address = ToKjAddress(address.cStr());
  if (!kj_address.ok()) return ExceptionFromStatus(kj_address.status());
  kj::String token_copy = kj::str(token);
  return network.parseAddress(kj_address->c_str())
      .then([](kj::Own<kj::NetworkAddress> addr) { return addr->connect().attach(kj::mv(addr)); })
      .then([token = kj::mv(token_copy)](kj::Own<kj::AsyncIoStream> stream) mutable {
        auto connection = kj::heap<DispatcherConnection>(kj::mv(stream));
        auto& ref = *connection;
        return ref.Authenticate(token).then(
            [connection = kj::mv(connection)]() mutable { return kj::mv(connection); });
      });
}

kj::Promise<void> DispatcherConnection::Authenticate(kj::StringPtr token) {
  auto request = gateway_.authenticateRequest();
  request.setToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(token.begin()), token.size()));
  return request.send().then([this](capnp::Response<rpc::Gateway::AuthenticateResults> response) {
    dispatcher_ = response.getDispatcher();
  });
}

}  // namespace dispatch::clients
