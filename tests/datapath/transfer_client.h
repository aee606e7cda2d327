// TransferClient: a test's own consumer of a worker's transfer service,
// spoken to directly over Cap'n Proto on one connection, so that a test
// chooses every field of a request, and when the connection goes.
#pragma once

#include <capnp/rpc-twoparty.h>

#include <string>
#include <vector>

#include "common/address.h"
#include "schema/data_transfer.capnp.h"
#include "tests/integration/client_loop.h"

namespace dispatch::testing {

struct Ask {
  uint64_t task = 0, consumer = 7, sequence = 1;
  int64_t consumer_index = -1, round = -1;
  uint32_t max_elements = 4, wait_ms = 50;
};

// Sends `request` and waits on `loop`: its reply, or the error's description.
template <typename Request>
auto SendAndWait(ClientLoop& loop, Request& request, std::string* error) {
  kj::Maybe<decltype(loop.Wait(request.send()))> out;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { out = loop.Wait(request.send()); })) {
    *error = e->getDescription().cStr();
  }
  return out;
}

class TransferClient {
 public:
  TransferClient(ClientLoop& loop, const std::string& address) : loop_(loop) {
    auto kj_address = ToKjAddress(address);
    stream_ = loop.Wait(loop.io().network().parseAddress(kj_address->c_str()).then([](auto a) {
      return a->connect().attach(kj::mv(a));
    }));
    rpc_ = kj::heap<capnp::TwoPartyClient>(*stream_);
    data_ = rpc_->bootstrap().castAs<rpc::WorkerData>();
  }

  // getElement: the reply, or the error's description.
  kj::Maybe<capnp::Response<rpc::WorkerData::GetElementResults>> GetOne(const Ask& ask,
                                                                        std::string* error) {
    auto request = data_.getElementRequest();
    Fill(ask, request.initRequest());
    return SendAndWait(loop_, request, error);
  }

  static void Fill(const Ask& ask, rpc::ElementRequest::Builder r) {
    r.setTaskId(ask.task);
    r.setConsumerId(ask.consumer);
    r.setSequence(ask.sequence);
    r.setConsumerIndex(ask.consumer_index);
    r.setRound(ask.round);
    r.setMaxElements(ask.max_elements);
    r.setWaitMillis(ask.wait_ms);
  }

  // getElements, sent and not waited for.
  kj::Promise<capnp::Response<rpc::WorkerData::GetElementsResults>> Send(const Ask& ask) {
    auto request = data_.getElementsRequest();
    Fill(ask, request.initRequest());
    return request.send();
  }

  // getElements: the reply, or the error's description.
  kj::Maybe<capnp::Response<rpc::WorkerData::GetElementsResults>> Get(const Ask& ask,
                                                                      std::string* error) {
    auto request = data_.getElementsRequest();
    Fill(ask, request.initRequest());
    return SendAndWait(loop_, request, error);
  }

 private:
  ClientLoop& loop_;
  kj::Own<kj::AsyncIoStream> stream_;
  kj::Own<capnp::TwoPartyClient> rpc_;
  rpc::WorkerData::Client data_ = nullptr;
};

inline std::vector<std::string> ElementsOf(
    capnp::Response<rpc::WorkerData::GetElementsResults>& r) {
  std::vector<std::string> out;
  for (auto e : r.getResult().getElements()) out.emplace_back(e.asChars().begin(), e.size());
  return out;
}

}  // namespace dispatch::testing
