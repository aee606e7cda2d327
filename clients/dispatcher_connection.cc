#include "clients/dispatcher_connection.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/address.h"
#include "common/protocol_version.h"
#include "common/rpc_status.h"

namespace dispatch::clients {
namespace {

// One walk over an address list; owned by the promise of that walk.
struct Round {
  Round(kj::Network& network, DispatcherAddresses addresses, kj::StringPtr token,
        kj::Timer* timer, uint64_t attempt_timeout_ms)
      : network(network),
        addresses(std::move(addresses)),
        token(kj::str(token)),
        timer(timer),
        attempt_timeout_ms(attempt_timeout_ms),
        queue(this->addresses.RoundOrder()) {}

  bool Tried(const std::string& address) const {
    return std::find(tried.begin(), tried.end(), address) != tried.end();
  }

  kj::Network& network;
  const DispatcherAddresses addresses;
  const kj::String token;
  kj::Timer* const timer;
  const uint64_t attempt_timeout_ms;
  std::vector<std::string> queue;  // what this round tries, in order
  size_t next = 0;
  bool followed = false;  // a "the leader is ADDRESS" was followed already
  std::vector<std::string> tried;
  std::vector<std::pair<std::string, kj::Exception>> failures;
};

kj::Exception RoundFailed(Round& round) {
  if (round.failures.size() == 1) return kj::mv(round.failures.front().second);
  bool refused_token = false;
  std::string each;
  for (auto& [address, exception] : round.failures) {
    Status status = StatusFromException(exception);
    refused_token = refused_token || status.code() == StatusCode::kUnauthenticated;
    if (!each.empty()) each += "; ";
    each += address + ": " + status.ToString();
  }
  std::string message = "no dispatcher of " + std::to_string(round.failures.size()) +
                        " tried took the connection (" + each + ")";
  return ExceptionFromStatus(refused_token ? UnauthenticatedError(std::move(message))
                                           : UnavailableError(std::move(message)));
}

kj::Promise<kj::Own<DispatcherConnection>> Attempt(Round& round) {
  while (round.next < round.queue.size() && round.Tried(round.queue[round.next])) ++round.next;
  if (round.next == round.queue.size()) return RoundFailed(round);
  std::string address = round.queue[round.next++];
  round.tried.push_back(address);
  kj::Promise<kj::Own<DispatcherConnection>> attempt =
      DispatcherConnection::ConnectOne(round.network, address, round.token);
  if (round.timer != nullptr && round.attempt_timeout_ms > 0) {
    const uint64_t ms = round.attempt_timeout_ms;
    attempt = kj::mv(attempt).exclusiveJoin(round.timer->afterDelay(ms * kj::MILLISECONDS)
                                        .then([address, ms]() -> kj::Own<DispatcherConnection> {
                                          ThrowStatus(UnavailableError(
                                              "no answer from " + address + " within " +
                                              std::to_string(ms) + " ms"));
                                        }));
  }
  return attempt.then(
      [&round, address](kj::Own<DispatcherConnection> connection)
          -> kj::Promise<kj::Own<DispatcherConnection>> {
        round.addresses.Worked(address);
        return kj::mv(connection);
      },
      [&round, address](kj::Exception&& e) -> kj::Promise<kj::Own<DispatcherConnection>> {
        std::optional<std::string> leader = LeaderNamedIn(StatusFromException(e));
        if (leader && !round.followed && !round.Tried(*leader)) {
          round.followed = true;
          round.queue.insert(round.queue.begin() + static_cast<std::ptrdiff_t>(round.next), *leader);
        }
        round.failures.emplace_back(address, kj::mv(e));
        return Attempt(round);
      });
}

}  // namespace

DispatcherConnection::DispatcherConnection(kj::Own<kj::AsyncIoStream> stream, std::string address)
    : stream_(kj::mv(stream)),
      address_(std::move(address)),
      client_(*stream_),
      gateway_(client_.bootstrap().castAs<rpc::Gateway>()),
      dispatcher_(nullptr) {}

kj::Promise<kj::Own<DispatcherConnection>> DispatcherConnection::Connect(
    kj::Network& network, const DispatcherAddresses& addresses, kj::StringPtr token,
    kj::Timer* timer, uint64_t attempt_timeout_ms) {
  auto round = kj::heap<Round>(network, addresses, token, timer, attempt_timeout_ms);
  Round& ref = *round;
  return Attempt(ref).attach(kj::mv(round));
}

kj::Promise<kj::Own<DispatcherConnection>> DispatcherConnection::Connect(kj::Network& network,
                                                                         kj::StringPtr addresses,
                                                                         kj::StringPtr token) {
  Result<DispatcherAddresses> parsed = DispatcherAddresses::Parse(addresses.cStr());
  if (!parsed.ok()) return ExceptionFromStatus(parsed.status());
  return Connect(network, *parsed, token);
}

kj::Promise<kj::Own<DispatcherConnection>> DispatcherConnection::ConnectOne(kj::Network& network,
                                                                            kj::StringPtr address,
                                                                            kj::StringPtr token) {
  Result<std::string> kj_address = ToKjAddress(address.cStr());
  if (!kj_address.ok()) return ExceptionFromStatus(kj_address.status());
  return network.parseAddress(kj_address->c_str())
      .then([](kj::Own<kj::NetworkAddress> addr) { return addr->connect().attach(kj::mv(addr)); })
      .then([token = kj::str(token), address = std::string(address.cStr())](
                kj::Own<kj::AsyncIoStream> stream) mutable {
        auto connection = kj::heap<DispatcherConnection>(kj::mv(stream), kj::mv(address));
        auto& ref = *connection;
        return ref.Authenticate(token).then(
            [connection = kj::mv(connection)]() mutable { return kj::mv(connection); });
      });
}

kj::Promise<void> DispatcherConnection::Authenticate(kj::StringPtr token) {
  auto request = gateway_.authenticateRequest();
  request.setToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(token.begin()), token.size()));
  // A dispatcher that no longer serves this version says so (FailedPrecondition).
  request.setProtocol(kProtocolVersion);
  return request.send().then([this](capnp::Response<rpc::Gateway::AuthenticateResults> response) {
    dispatcher_ = response.getDispatcher();
  });
}

}  // namespace dispatch::clients
