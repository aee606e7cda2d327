// Status -> exception -> wire -> Status, over a real loopback connection
// (issue 16): an in-test Dispatcher whose ping fails with the Status its
// payload names, reached through our client's DispatcherConnection, must give
// each code back with its message (common/rpc_status.h is both ends). An
// exception without a code (a bug's KJ_REQUIRE, thrown at once or later)
// leaves the edge (DispatchWithPeerErrors) as Internal, never as bare text.
#include <capnp/rpc-twoparty.h>
#include <gtest/gtest.h>
#include <kj/debug.h>

#include <optional>
#include <string>

#include "common/rpc_status.h"
#include "reactor/service_util.h"
#include "tests/integration/client_loop.h"

namespace dispatch::testing {
namespace {

constexpr StatusCode kCodes[] = {
    StatusCode::kInvalidArgument,   StatusCode::kNotFound,    StatusCode::kAlreadyExists,
    StatusCode::kFailedPrecondition, StatusCode::kResourceExhausted, StatusCode::kUnavailable,
    StatusCode::kDataLoss,          StatusCode::kInternal,    StatusCode::kUnauthenticated,
    StatusCode::kCancelled,         StatusCode::kDeadlineExceeded,
};

// ping(payload): payload "bug-now" / "bug-later" fails without a code (at once
// / after a turn of the loop); payload {i} fails with kCodes[i].
class FailingDispatcher final : public rpc::Dispatcher::Server {
 public:
  DispatchCallResult dispatchCall(
      uint64_t interface_id, uint16_t method_id,
      capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) override {
    return reactor::DispatchWithPeerErrors([&]() {
      return rpc::Dispatcher::Server::dispatchCall(interface_id, method_id, context);
    });
  }

 protected:
  kj::Promise<void> ping(PingContext context) override {
    auto payload = context.getParams().getPayload();
    std::string text(reinterpret_cast<const char*>(payload.begin()), payload.size());
    if (text == "bug-now") KJ_FAIL_REQUIRE("a caller bug, thrown at once");
    if (text == "bug-later") {
      return kj::evalLater([]() { KJ_FAIL_ASSERT("our bug, thrown later"); });
    }
    const StatusCode code = kCodes[payload[0]];
    ThrowStatus(Status(code, std::string("thing 17: ") + StatusCodeName(code) + " here"));
  }
};

class Gateway final : public rpc::Gateway::Server {
 protected:
  kj::Promise<void> authenticate(AuthenticateContext context) override {
    context.getResults().setDispatcher(kj::heap<FailingDispatcher>());
    return kj::READY_NOW;
  }
};

// A loopback connection from our client to the in-test Gateway, on one loop.
class RoundTrip {
 public:
  RoundTrip() {
    auto address = loop_.Wait(loop_.io().network().parseAddress("127.0.0.1", 0));
    listener_ = address->listen();
    serving_ = server_.listen(*listener_).eagerlyEvaluate(nullptr);
    connection_ = loop_.Connect("tcp:127.0.0.1:" + std::to_string(listener_->getPort()));
  }

  // The Status our client makes of ping(payload)'s failure; `description`
  // gets the exception's text as received.
  Status Ping(const std::string& payload, std::string* description = nullptr) {
    auto request = connection_->dispatcher().pingRequest();
    request.setPayload(
        kj::arrayPtr(reinterpret_cast<const kj::byte*>(payload.data()), payload.size()));
    Status status = InternalError("ping succeeded");
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { loop_.Wait(request.send()); })) {
      EXPECT_EQ(std::string(e->getDescription().cStr()).rfind("remote exception: ", 0), 0u)
          << e->getDescription().cStr();
      status = StatusFromException(*e);
      if (description != nullptr) *description = e->getDescription().cStr();
    }
    return status;
  }

 private:
  ClientLoop loop_;
  capnp::TwoPartyServer server_{kj::heap<Gateway>()};
  kj::Own<kj::ConnectionReceiver> listener_;
  kj::Promise<void> serving_ = nullptr;
  kj::Own<clients::DispatcherConnection> connection_;
};

TEST(RpcStatusRoundTrip, EveryStatusCodeComesBackAsTheSameStatus) {
  RoundTrip trip;
  for (size_t i = 0; i < sizeof(kCodes) / sizeof(kCodes[0]); ++i) {
    const Status sent(kCodes[i], std::string("thing 17: ") + StatusCodeName(kCodes[i]) + " here");
    EXPECT_EQ(trip.Ping(std::string(1, static_cast<char>(i))), sent) << sent.ToString();
  }
}

TEST(RpcStatusRoundTrip, AnExceptionWithoutACodeLeavesTheEdgeAsInternal) {
  RoundTrip trip;
  // On the wire, not only after our client's mapping: a peer in another
  // language sees the code too.
  std::string wire;
  Status now = trip.Ping("bug-now", &wire);
  EXPECT_EQ(wire.rfind("remote exception: Internal: ", 0), 0u) << wire;
  EXPECT_EQ(now.code(), StatusCode::kInternal) << now.ToString();
  EXPECT_NE(now.message().find("a caller bug, thrown at once"), std::string::npos)
      << now.ToString();
  Status later = trip.Ping("bug-later", &wire);
  EXPECT_EQ(wire.rfind("remote exception: Internal: ", 0), 0u) << wire;
  EXPECT_EQ(later.code(), StatusCode::kInternal) << later.ToString();
  EXPECT_NE(later.message().find("our bug, thrown later"), std::string::npos) << later.ToString();
}

TEST(RpcStatus, AFailureOfReadingThePeersMessageLeavesAsInvalidArgument) {
  // Where Cap'n Proto throws when a message is malformed or over its limits.
  kj::Exception malformed(kj::Exception::Type::FAILED, "src/capnp/layout.c++", 2233,
                          kj::str("Message contains out-of-bounds struct pointer."));
  kj::Exception sent = ExceptionForPeer(kj::mv(malformed));
  EXPECT_EQ(sent.getType(), kj::Exception::Type::FAILED);
  EXPECT_EQ(std::string(sent.getDescription().cStr()),
            "InvalidArgument: the message is malformed: Message contains out-of-bounds struct "
            "pointer.");
  // One with a code, or UNIMPLEMENTED, leaves unchanged.
  kj::Exception coded = ExceptionFromStatus(NotFoundError("job 17 is unknown"));
  EXPECT_EQ(std::string(ExceptionForPeer(coded).getDescription().cStr()),
            "NotFound: job 17 is unknown");
  kj::Exception unknown_method(kj::Exception::Type::UNIMPLEMENTED, __FILE__, __LINE__,
                               kj::str("Method not implemented."));
  EXPECT_EQ(ExceptionForPeer(unknown_method).getType(), kj::Exception::Type::UNIMPLEMENTED);
}

TEST(RpcStatus, ADescriptionWithoutAKnownCodeMapsByTheExceptionType) {
  using Type = kj::Exception::Type;
  auto status_of = [](Type type, const char* text) {
    return StatusFromException(kj::Exception(type, __FILE__, __LINE__, kj::str(text)));
  };
  EXPECT_EQ(status_of(Type::DISCONNECTED, "remote exception: Peer disconnected").code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(status_of(Type::OVERLOADED, "busy").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(status_of(Type::UNIMPLEMENTED, "method not implemented").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(status_of(Type::FAILED, "Nonsense: no such code").code(), StatusCode::kInternal);
  EXPECT_EQ(status_of(Type::FAILED, "OK: is no error code").code(), StatusCode::kInternal);
  // The code wins over the type.
  EXPECT_EQ(status_of(Type::FAILED, "remote exception: Unavailable: going away"),
            UnavailableError("going away"));
}

}  // namespace
}  // namespace dispatch::testing
