// Peers that misbehave: garbage on the socket, vanishing mid-message,
// oversized messages, wrong tokens, silence, too many connections. Each
// costs the misbehaving connection only; every other client keeps working.
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "common/rpc_status.h"
#include "tests/integration/client_loop.h"
#include "tests/integration/probe.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/test_seed.h"
#include "tests/support/raw_socket.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

TEST(HostilePeer, RandomBytesCloseThatConnectionOnly) {
  std::mt19937_64 rng(TestSeed());
  DispatcherProcess dispatcher;
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  for (int round = 0; round < 20; ++round) {
    RawSocket raw(dispatcher.address());
    std::string garbage(1 + rng() % 65536, '\0');
    for (auto& c : garbage) c = static_cast<char>(rng());
    raw.WriteAll(garbage.data(), garbage.size());
    // Garbage may announce a frame longer than what was sent; end the stream
    // so the dispatcher sees a message that can never complete.
    shutdown(raw.fd(), SHUT_WR);
    EXPECT_TRUE(raw.PeerClosesWithin(10s)) << "round " << round;
    probe.PingOk();
  }
  EXPECT_TRUE(probe.OpenConnectionsReach(1));
}

TEST(HostilePeer, WellFramedGarbageClosesThatConnectionAtOnce) {
  std::mt19937_64 rng(TestSeed());
  DispatcherProcess dispatcher;
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  for (int round = 0; round < 20; ++round) {
    RawSocket raw(dispatcher.address());
    uint32_t words = 1 + rng() % 64;
    std::string frame = FrameHeader(words);
    for (uint32_t i = 0; i < words * 8; ++i) frame.push_back(static_cast<char>(rng()));
    raw.WriteAll(frame.data(), frame.size());
    // No half-close here: a complete but meaningless message must be refused.
    EXPECT_TRUE(raw.PeerClosesWithin(10s)) << "round " << round;
  }
  probe.PingOk();
  EXPECT_TRUE(probe.OpenConnectionsReach(1));
}

TEST(HostilePeer, FrameAnnouncingAHugeSegmentIsRefusedBeforeItArrives) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-message-bytes=1048576"}});
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  RawSocket raw(dispatcher.address());
  std::string header = FrameHeader(1u << 30);  // 8 GiB announced
  raw.WriteAll(header.data(), header.size());
  EXPECT_TRUE(raw.PeerClosesWithin(10s));
  probe.PingOk();
}

TEST(HostilePeer, ClientVanishingMidMessageDisturbsNoOne) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  {
    // Half a message, then a reset.
    RawSocket raw(dispatcher.address());
    std::string frame = FrameHeader(1000) + std::string(800, 'x');
    raw.WriteAll(frame.data(), frame.size());
    raw.Reset();
  }
  {
    // A real client that sends a 4 MiB call and is gone before the reply.
    auto doomed = loop.Connect(dispatcher.address());
    auto request = doomed->dispatcher().pingRequest();
    request.setPayload(kj::heapArray<kj::byte>(4 << 20));
    auto pending = request.send();
    // One turn of the loop starts the write (some of it leaves), then the
    // connection drops with the call in flight.
    loop.wait_scope().poll();
  }
  for (int i = 0; i < 100; ++i) probe.PingOk(1000);
  EXPECT_TRUE(probe.OpenConnectionsReach(1));
}

TEST(HostilePeer, OversizedMessageClosesThatConnectionOnly) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-message-bytes=65536"}});
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  auto big = loop.Connect(dispatcher.address());
  auto request = big->dispatcher().pingRequest();
  request.setPayload(kj::heapArray<kj::byte>(128 * 1024));
  try {
    loop.Wait(request.send());
    FAIL() << "a 128 KiB message passed a 64 KiB limit";
  } catch (const kj::Exception& e) {
    EXPECT_EQ(e.getType(), kj::Exception::Type::DISCONNECTED) << e.getDescription().cStr();
  }
  probe.PingOk(32 * 1024);
  EXPECT_TRUE(probe.OpenConnectionsReach(1));
}

TEST(HostilePeer, WrongTokenIsRefusedAndRightTokenAdmitted) {
  DispatcherProcess dispatcher({.extra_flags = {"--token=sesame"}});
  ClientLoop loop;
  try {
    loop.Connect(dispatcher.address(), "wrong");
    FAIL() << "a wrong token was admitted";
  } catch (const kj::Exception& e) {
    EXPECT_EQ(StatusFromException(e).code(), StatusCode::kUnauthenticated) << e.getDescription().cStr();
  }
  Probe probe{loop, loop.Connect(dispatcher.address(), "sesame")};
  probe.PingOk();
  EXPECT_GE(probe.Stats().getStats().getAuthenticationFailures(), 1u);
}

TEST(HostilePeer, NothingButTheGatewayAnswersBeforeAuthentication) {
  DispatcherProcess dispatcher({.extra_flags = {"--token=sesame"}});
  ClientLoop loop;
  auto stream = loop.Wait(loop.io().network().parseAddress(dispatcher.address().substr(4).c_str()))->connect();
  auto connection = loop.Wait(kj::mv(stream));
  capnp::TwoPartyClient client(*connection);
  // Pretend the bootstrap is already the dispatcher.
  auto sneaky = client.bootstrap().castAs<rpc::Dispatcher>();
  try {
    loop.Wait(sneaky.getVersionRequest().send());
    FAIL() << "the dispatcher answered before authentication";
  } catch (const kj::Exception& e) {
    EXPECT_EQ(e.getType(), kj::Exception::Type::UNIMPLEMENTED) << e.getDescription().cStr();
  }
}

TEST(HostilePeer, RepeatedWrongTokensCloseTheConnection) {
  DispatcherProcess dispatcher({.extra_flags = {"--token=sesame"}});
  ClientLoop loop;
  auto stream = loop.Wait(loop.io().network().parseAddress(dispatcher.address().substr(4).c_str()))->connect();
  auto connection = loop.Wait(kj::mv(stream));
  capnp::TwoPartyClient client(*connection);
  auto gateway = client.bootstrap().castAs<rpc::Gateway>();
  for (int i = 0; i < 3; ++i) {
    auto request = gateway.authenticateRequest();
    request.setToken(kj::heapArray<kj::byte>(4));
    EXPECT_ANY_THROW(loop.Wait(request.send()));
  }
  loop.Wait(client.onDisconnect());
}

// The rule PROTOCOL.md states: each wrong token is Unauthenticated and leaves
// the connection at the gate, where the right token still passes; the third
// failed authenticate of a connection closes it, successes in between
// notwithstanding.
TEST(HostilePeer, TwoWrongTokensLeaveTheConnectionAtTheGateAndTheThirdClosesIt) {
  DispatcherProcess dispatcher({.extra_flags = {"--token=sesame"}});
  ClientLoop loop;
  auto stream = loop.Wait(loop.io().network().parseAddress(dispatcher.address().substr(4).c_str()))->connect();
  auto connection = loop.Wait(kj::mv(stream));
  capnp::TwoPartyClient client(*connection);
  auto gateway = client.bootstrap().castAs<rpc::Gateway>();
  auto authenticate = [&](const std::string& token) {
    auto request = gateway.authenticateRequest();
    request.setToken(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(token.data()), token.size()));
    return request.send();
  };
  for (int i = 0; i < 2; ++i) {
    try {
      loop.Wait(authenticate("wrong"));
      FAIL() << "a wrong token was admitted";
    } catch (const kj::Exception& e) {
      EXPECT_EQ(StatusFromException(e).code(), StatusCode::kUnauthenticated) << e.getDescription().cStr();
    }
  }
  // Still at the gate: the right token passes on the same connection.
  auto dispatcher_cap = loop.Wait(authenticate("sesame")).getDispatcher();
  auto ping = dispatcher_cap.pingRequest();
  loop.Wait(ping.send());
  // The third failure on this connection closes it.
  EXPECT_ANY_THROW(loop.Wait(authenticate("wrong")));
  loop.Wait(client.onDisconnect());
}

TEST(HostilePeer, SilentConnectionIsClosedAfterTheHandshakeTimeout) {
  DispatcherProcess dispatcher({.extra_flags = {"--handshake-timeout-ms=200"}});
  RawSocket silent(dispatcher.address());
  EXPECT_TRUE(silent.PeerClosesWithin(10s));
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  probe.PingOk();
  EXPECT_GE(probe.Stats().getStats().getClosedHandshakeTimeout(), 1u);
}

TEST(HostilePeer, ConnectionsOverTheLimitAreRefused) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-connections=2"}});
  ClientLoop loop;
  Probe first{loop, loop.Connect(dispatcher.address())};
  Probe second{loop, loop.Connect(dispatcher.address())};
  RawSocket third(dispatcher.address());
  EXPECT_TRUE(third.PeerClosesWithin(10s));
  first.PingOk();
  second.PingOk();
  EXPECT_GE(first.Stats().getStats().getRefusedOverConnectionLimit(), 1u);
}

}  // namespace
}  // namespace dispatch::testing
