// Limits that hold across all peers or over time (issue 12): one process-wide
// budget for the bytes held for peers, a deadline for a begun message, a
// count of connections per peer address, and oversized messages that are
// counted and explained to the peer. Each test also shows that an ordinary
// client is still served.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/integration/client_loop.h"
#include "tests/integration/probe.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/raw_socket.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

// Resident set size of `pid`, from /proc.
uint64_t RssBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(PeerLimits, HalfMessagesOnManyConnectionsStayWithinTheBudget) {
  constexpr uint64_t kBudget = 32ull << 20;
  constexpr uint32_t kMessageBytes = 8u << 20;
  constexpr int kPeers = 16;
  DispatcherProcess dispatcher({.extra_flags = {"--peer-memory-budget-bytes=" + std::to_string(kBudget),
                                                "--max-message-bytes=16777216",
                                                "--handshake-timeout-ms=600000",
                                                "--message-timeout-ms=600000", "--tick-ms=20"}});
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  probe.PingOk();
  const pid_t pid = dispatcher.process().pid();
  const uint64_t rss_before = RssBytes(pid);

  // Each peer announces 8 MiB and sends 6 MiB of it, then stalls.
  std::string part(6u << 20, 'x');
  std::vector<std::unique_ptr<RawSocket>> peers;
  for (int i = 0; i < kPeers; ++i) {
    peers.push_back(std::make_unique<RawSocket>(dispatcher.address()));
    std::string header = FrameHeader(kMessageBytes / 8);
    ASSERT_TRUE(peers.back()->WriteAll(header.data(), header.size()));
    peers.back()->WriteWithin(part.data(), part.size(), 200ms);
  }
  // Large messages may use 7/8 of the budget: three 8 MiB bodies fit, the
  // other thirteen wait without being read.
  const uint64_t admitted = (kBudget - kBudget / 8) / (kMessageBytes + 8);
  EXPECT_TRUE(WaitUntil(
      [&] { return probe.Stats().getStats().getPeerMemoryWaiting() == kPeers - admitted; }, loop))
      << "waiting: " << probe.Stats().getStats().getPeerMemoryWaiting();
  // Ordinary calls from another connection are still answered.
  for (int i = 0; i < 20; ++i) probe.PingOk(1000);

  auto stats = probe.Stats().getStats();
  EXPECT_EQ(stats.getPeerMemoryLimitBytes(), kBudget);
  EXPECT_LE(stats.getPeerMemoryHighWaterBytes(), kBudget);
  EXPECT_GE(stats.getPeerMemoryWaits(), kPeers - admitted);
  const uint64_t rss_after = RssBytes(pid);
  // Without the budget the sixteen half messages take 96 MiB.
  EXPECT_LT(rss_after, rss_before + kBudget) << "RSS grew from " << rss_before << " to " << rss_after;

  // Gone peers give their reservations back.
  peers.clear();
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto s = probe.Stats().getStats();
        return s.getPeerMemoryWaiting() == 0 && s.getConnectionsOpen() == 1 &&
               s.getPeerMemoryUsedBytes() < 64 * 1024;
      },
      loop));
}

// A client stream whose reads can be stopped: its peer's replies then pile
// up in the dispatcher's outbound queue.
class PausableStream final : public kj::AsyncIoStream {
 public:
  explicit PausableStream(kj::Own<kj::AsyncIoStream> inner) : inner_(kj::mv(inner)) {}
  void Pause() { paused_ = true; }
  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override {
    if (paused_) return kj::Promise<size_t>(kj::NEVER_DONE);
    return inner_->tryRead(buffer, min_bytes, max_bytes);
  }
  kj::Promise<void> write(const void* buffer, size_t size) override { return inner_->write(buffer, size); }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    return inner_->write(pieces);
  }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }

 private:
  kj::Own<kj::AsyncIoStream> inner_;
  bool paused_ = false;
};

TEST(PeerLimits, RepliesQueuedPastTheBudgetCloseThePeerHoldingTheMost) {
  DispatcherProcess dispatcher({.extra_flags = {"--peer-memory-budget-bytes=8388608", "--tick-ms=20",
                                                "--max-outbound-bytes=1099511627776"}});
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  // A 1 MiB definition: each small getDatasetDef call is answered with 1 MiB.
  auto define = probe.conn->dispatcher().getOrRegisterDatasetRequest();
  define.setDefinition(kj::heapArray<kj::byte>(1 << 20));
  const uint64_t dataset_id = loop.Wait(define.send()).getDatasetId();

  auto socket = loop.Wait(loop.Wait(loop.io().network().parseAddress(dispatcher.address().substr(4).c_str()))->connect());
  PausableStream stream(kj::mv(socket));
  capnp::TwoPartyClient client(stream);
  auto authenticate = client.bootstrap().castAs<rpc::Gateway>().authenticateRequest();
  authenticate.setToken(kj::heapArray<kj::byte>(0));
  auto slow = loop.Wait(authenticate.send()).getDispatcher();
  stream.Pause();
  bool closed = false;
  auto disconnected = client.onDisconnect().then([&] { closed = true; }, [&](kj::Exception&&) { closed = true; })
                          .eagerlyEvaluate(nullptr);
  std::vector<kj::Promise<void>> pending;
  for (int i = 0; i < 64; ++i) {
    auto request = slow.getDatasetDefRequest();
    request.setDatasetId(dataset_id);
    pending.push_back(request.send().ignoreResult().eagerlyEvaluate([](kj::Exception&&) {}));
  }
  EXPECT_TRUE(
      WaitUntil([&] { return probe.Stats().getStats().getClosedOutboundOverBudget() >= 1; }, loop))
      << "queued: " << probe.Stats().getStats().getPeerMemoryQueuedReplyBytes();
  probe.PingOk(32 * 1024);
  EXPECT_EQ(probe.Stats().getStats().getClosedOutboundBytes(), 0u);
  EXPECT_TRUE(WaitUntil([&] { return probe.Stats().getStats().getConnectionsOpen() == 1; }, loop));
}

TEST(PeerLimits, AMessageThatNeverFitsTheBudgetIsRefusedWithItsReason) {
  DispatcherProcess dispatcher({.extra_flags = {"--peer-memory-budget-bytes=1048576"}});
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  auto big = loop.Connect(dispatcher.address());
  auto request = big->dispatcher().pingRequest();
  request.setPayload(kj::heapArray<kj::byte>(2 << 20));
  try {
    loop.Wait(request.send());
    FAIL() << "a 2 MiB message passed a 1 MiB budget";
  } catch (const kj::Exception& e) {
    EXPECT_TRUE(strstr(e.getDescription().cStr(), "--peer-memory-budget-bytes") != nullptr)
        << e.getDescription().cStr();
  }
  probe.PingOk(32 * 1024);
  EXPECT_GE(probe.Stats().getStats().getPeerMemoryRefusals(), 1u);
}

TEST(PeerLimits, AnAuthenticatedPeerDribblingAMessageIsClosedAtTheDeadline) {
  DispatcherProcess dispatcher({.extra_flags = {"--message-timeout-ms=1000", "--tick-ms=50",
                                                "--handshake-timeout-ms=600000"}});
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  // A real Cap'n Proto client that authenticates, then writes a message
  // beside its RPC system, one byte at a time.
  auto stream = loop.Wait(loop.io().network().parseAddress(dispatcher.address().substr(4).c_str()))->connect();
  auto connection = loop.Wait(kj::mv(stream));
  capnp::TwoPartyClient client(*connection);
  auto gateway = client.bootstrap().castAs<rpc::Gateway>();
  auto authenticate = gateway.authenticateRequest();
  authenticate.setToken(kj::heapArray<kj::byte>(0));
  auto authenticated = loop.Wait(authenticate.send());
  loop.Wait(authenticated.getDispatcher().getVersionRequest().send());
  int fd = KJ_ASSERT_NONNULL(connection->getFd());

  bool closed = false;
  auto disconnected = client.onDisconnect().then([&] { closed = true; }, [&](kj::Exception&&) { closed = true; })
                          .eagerlyEvaluate(nullptr);
  std::string message = FrameHeader(1000) + std::string(8000, 'x');
  size_t sent = 0;
  // A byte a check: the whole 8 KiB would take 40 s, forty times the timeout.
  EXPECT_TRUE(WaitUntil(
      [&] {
        if (closed) return true;
        if (sent < message.size() && send(fd, &message[sent], 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
          ++sent;
        probe.PingOk();
        return false;
      },
      loop))
      << "still open after " << sent << " bytes";
  EXPECT_GE(probe.Stats().getStats().getClosedMessageTimeout(), 1u);
  probe.PingOk();
}

TEST(PeerLimits, OversizedMessageIsCountedAndTheClientToldTheLimit) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-message-bytes=65536"}});
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  auto big = loop.Connect(dispatcher.address());
  auto request = big->dispatcher().pingRequest();
  // Far more than the socket buffers hold: refused at its header without the
  // body being read, the close resets the connection and the client sees
  // only "Broken pipe" or "Connection reset".
  request.setPayload(kj::heapArray<kj::byte>(16 << 20));
  try {
    loop.Wait(request.send());
    FAIL() << "a 16 MiB message passed a 64 KiB limit";
  } catch (const kj::Exception& e) {
    EXPECT_EQ(e.getType(), kj::Exception::Type::DISCONNECTED) << e.getDescription().cStr();
    EXPECT_TRUE(strstr(e.getDescription().cStr(), "65536 bytes (--max-message-bytes)") != nullptr)
        << e.getDescription().cStr();
  }
  probe.PingOk(32 * 1024);
  EXPECT_EQ(probe.Stats().getStats().getClosedOversizedMessage(), 1u);
}

TEST(PeerLimits, OversizedMessageFromARawSocketGetsAnAbortNamingTheLimit) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-message-bytes=65536"}});
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  RawSocket raw(dispatcher.address());
  std::string message = FrameHeader(32768) + std::string(32768 * 8, 'x');  // 256 KiB
  EXPECT_EQ(raw.WriteWithin(message.data(), message.size(), 10s), message.size());
  auto received = raw.ReadUntilClosed(10s);
  ASSERT_TRUE(received.has_value()) << "the dispatcher kept the connection open";
  // The abort message carries the reason as text.
  EXPECT_NE(received->find("--max-message-bytes"), std::string::npos) << received->size() << " bytes received";
  probe.PingOk();
  EXPECT_EQ(probe.Stats().getStats().getClosedOversizedMessage(), 1u);
}

TEST(PeerLimits, ConnectionsFromOneAddressOverItsLimitAreRefused) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-connections-per-address=2"}});
  ClientLoop loop;
  Probe first{loop, loop.Connect(dispatcher.address())};
  Probe second{loop, loop.Connect(dispatcher.address())};
  {
    RawSocket third(dispatcher.address());
    EXPECT_TRUE(third.PeerClosesWithin(10s));
  }
  first.PingOk();
  second.PingOk();
  EXPECT_GE(first.Stats().getStats().getRefusedOverAddressLimit(), 1u);
  // A slot freed is a slot usable again.
  second.conn = nullptr;
  EXPECT_TRUE(WaitUntil([&] { return first.Stats().getStats().getConnectionsOpen() == 1; }, loop));
  Probe again{loop, loop.Connect(dispatcher.address())};
  again.PingOk();
}

// Runs the dispatcher with `flags` through a shell (stderr into stdout);
// returns its exit code, -1 if it is still running after 10 s, and its output.
int RunDispatcher(const std::string& flags, std::string* out) {
  Subprocess process({"/bin/sh", "-c",
                      "exec " + std::string(DispatcherBinary()) + " --http=tcp:127.0.0.1:0 " + flags + " 2>&1"});
  while (auto line = process.ReadLine(10s)) {
    *out += *line + "\n";
    if (line->rfind("dispatcher listening on ", 0) == 0) {
      process.Signal(SIGTERM);
    }
  }
  auto status = process.Wait(10s);
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

TEST(PeerLimits, ListeningBeyondLoopbackWithoutATokenNeedsTheExplicitFlag) {
  TempDir dir;
  std::string out;
  EXPECT_EQ(RunDispatcher("--listen=tcp:0.0.0.0:0 --work-dir=" + dir.path() + "/a", &out), 2) << out;
  EXPECT_NE(out.find("--allow-remote-without-token"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunDispatcher("--listen=tcp:0.0.0.0:0 --token=sesame --work-dir=" + dir.path() + "/b", &out), 0)
      << out;
  out.clear();
  EXPECT_EQ(RunDispatcher("--listen=tcp:0.0.0.0:0 --allow-remote-without-token --work-dir=" + dir.path() + "/c",
                          &out),
            0)
      << out;
  EXPECT_NE(out.find("without a token"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunDispatcher("--listen=tcp:127.0.0.1:0 --work-dir=" + dir.path() + "/d", &out), 0) << out;
}

}  // namespace
}  // namespace dispatch::testing
