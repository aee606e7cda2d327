// kj::Network over the bridge: TCP and Unix-domain listen/connect, refused
// connects, name lookups (KJ's lookup thread answers through a pipe), and
// accept() when the process has run out of descriptors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <kj/debug.h>
#include <kj/io.h>
#include <kj/vector.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "reactor/uvkj/repeating_timer.h"
#include "tests/uvkj/test_util.h"

namespace dispatch::uvkj::testing {
namespace {

kj::Own<kj::NetworkAddress> Parse(UvAsyncIo& io, kj::StringPtr text, uint port = 0) {
  Outcome<kj::Own<kj::NetworkAddress>> parsed;
  auto parsing = Track(io.network().parseAddress(text, port), parsed);
  KJ_ASSERT(WaitUntil([&] { return parsed.done; }, LoopPasses(io)));
  KJ_IF_MAYBE (e, parsed.error) {
    kj::throwFatalException(kj::mv(*e));
  }
  return kj::mv(KJ_ASSERT_NONNULL(parsed.value));
}

// Connects to `listener` through `address`, sends a line each way, and
// checks both arrive.
void ExchangeThrough(UvAsyncIo& io, kj::NetworkAddress& address, kj::ConnectionReceiver& listener) {
  Outcome<kj::Own<kj::AsyncIoStream>> client;
  Outcome<kj::Own<kj::AsyncIoStream>> server;
  auto connecting = Track(address.connect(), client);
  auto accepting = Track(listener.accept(), server);
  ASSERT_TRUE(WaitUntil([&] { return client.done && server.done; }, LoopPasses(io)));
  KJ_IF_MAYBE (e, client.error) {
    FAIL() << kj::str(*e).cStr();
  }
  auto& c = *KJ_ASSERT_NONNULL(client.value);
  auto& s = *KJ_ASSERT_NONNULL(server.value);

  char up[5] = {};
  char down[5] = {};
  Outcome<size_t> got_up;
  Outcome<size_t> got_down;
  Outcome<void> sent_up;
  Outcome<void> sent_down;
  auto p1 = Track(s.tryRead(up, 4, 4), got_up);
  auto p2 = Track(c.tryRead(down, 4, 4), got_down);
  auto p3 = Track(c.write("ping", 4), sent_up);
  auto p4 = Track(s.write("pong", 4), sent_down);
  ASSERT_TRUE(
      WaitUntil([&] { return got_up.done && got_down.done && sent_up.done && sent_down.done; },
                LoopPasses(io)));
  EXPECT_STREQ(up, "ping");
  EXPECT_STREQ(down, "pong");
}

TEST(UvNetwork, ListensOnAnEphemeralLoopbackPortAndConnects) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    auto listener = Parse(io, "127.0.0.1:0")->listen();
    uint port = listener->getPort();
    ASSERT_NE(port, 0u);
    auto address = Parse(io, "127.0.0.1", port);
    ExchangeThrough(io, *address, *listener);
    ExchangeThrough(io, *address, *listener);  // the listener keeps accepting
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvNetwork, ResolvesAHostNameThroughKjsLookupThread) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    // "localhost" is not numeric, so KJ resolves it on a thread that answers
    // through a pipe, which the bridge reads with read(2), not recv(2).
    auto listener = Parse(io, "localhost:0")->listen();
    ASSERT_NE(listener->getPort(), 0u);
    auto address = Parse(io, "127.0.0.1", listener->getPort());
    ExchangeThrough(io, *address, *listener);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvNetwork, ListensAndConnectsOnAUnixSocketPath) {
  char dir[] = "/tmp/uvkj_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/dispatch.sock";
  Bridge bridge;
  auto& io = bridge.io();
  {
    auto address = Parse(io, kj::str("unix:", path.c_str()));
    auto listener = address->listen();
    EXPECT_EQ(access(path.c_str(), F_OK), 0);
    ExchangeThrough(io, *address, *listener);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
  unlink(path.c_str());
  rmdir(dir);
}

TEST(UvNetwork, ConnectToAClosedPortRejectsInsteadOfHanging) {
  // A port that was just free: bound, never listened on, then closed.
  int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(probe, 0);
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  uint port = ntohs(addr.sin_port);
  close(probe);

  Bridge bridge;
  auto& io = bridge.io();
  {
    auto address = Parse(io, "127.0.0.1", port);
    Outcome<kj::Own<kj::AsyncIoStream>> connected;
    auto connecting = Track(address->connect(), connected);
    ASSERT_TRUE(WaitUntil([&] { return connected.done; }, LoopPasses(io))) << "connect hung";
    KJ_IF_MAYBE (e, connected.error) {
      EXPECT_TRUE(strstr(e->getDescription().cStr(), strerror(ECONNREFUSED)) != nullptr)
          << kj::str(*e).cStr();
    } else {
      FAIL() << "connect to a closed port succeeded";
    }
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

// Lowers the soft descriptor limit so that exactly `free` more descriptors
// can be opened; restores it on destruction.
class DescriptorLimit {
 public:
  explicit DescriptorLimit(int free) {
    KJ_SYSCALL(getrlimit(RLIMIT_NOFILE, &saved_));
    int highest = -1;
    for (int fd = 0; fd < 4096; ++fd) {
      if (fcntl(fd, F_GETFD) >= 0) highest = fd;
    }
    struct rlimit lowered = saved_;
    lowered.rlim_cur = highest + 1 + free;
    KJ_SYSCALL(setrlimit(RLIMIT_NOFILE, &lowered));
    // Fill the holes below the limit, leaving `free` descriptors.
    for (;;) {
      int fd = dup(0);
      if (fd < 0) break;
      fillers_.add(kj::AutoCloseFd(fd));
    }
    for (int i = 0; i < free && !fillers_.empty(); ++i) fillers_.removeLast();
  }
  ~DescriptorLimit() { Restore(); }
  void Restore() {
    fillers_.clear();
    setrlimit(RLIMIT_NOFILE, &saved_);
  }

 private:
  struct rlimit saved_;
  kj::Vector<kj::AutoCloseFd> fillers_;
};

// Counts (and silences) the listener's "out of resources" warnings: one per
// accept() attempt that hit EMFILE.
class AcceptWarnings : public kj::ExceptionCallback {
 public:
  void logMessage(kj::LogSeverity severity, const char* file, int line, int context_depth,
                  kj::String&& text) override {
    if (strstr(text.cStr(), "accept() out of resources") != nullptr) {
      ++count;
      return;
    }
    next.logMessage(severity, file, line, context_depth, kj::mv(text));
  }
  uint64_t count = 0;
};

TEST(UvNetwork, AcceptWithoutFreeDescriptorsBacksOffWithoutSpinning) {
#if defined(__SANITIZE_ADDRESS__)
  // UBSan's vptr check probes memory through pipe(2); with no descriptor
  // left it reports every virtual call as "invalid vptr".
  GTEST_SKIP() << "needs descriptors the sanitizers would take";
#endif
  Bridge bridge;
  auto& io = bridge.io();
  {
    auto listener = Parse(io, "127.0.0.1:0")->listen();
    // A raw client completes the handshake into the backlog by itself.
    int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(client, 0);
    kj::AutoCloseFd client_fd(client);
    struct sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(listener->getPort());
    ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);

    DescriptorLimit limit(0);
    ASSERT_LT(dup(0), 0);  // the limit really bites
    ASSERT_EQ(errno, EMFILE);

    AcceptWarnings warnings;
    Outcome<kj::Own<kj::AsyncIoStream>> accepted;
    auto accepting = Track(listener->accept(), accepted);
    LoopCounter iterations(io.loop());
    UvRepeatingTimer tick(io.loop(), 10, [] {});
    tick.Start();
    ASSERT_TRUE(WaitUntil([&] { return tick.ticks() >= 30; }, LoopPasses(io)));  // ~3 back-offs
    EXPECT_FALSE(accepted.done) << "accept() succeeded without a free descriptor";
    EXPECT_LT(iterations.count(), 3 * tick.ticks() + 30) << "the loop spun on EMFILE";
    // About one attempt per 100 ms back-off over ~300 ms; a retry without
    // back-off makes thousands.
    EXPECT_GE(warnings.count, 1u);
    EXPECT_LT(warnings.count, tick.ticks()) << "accept() retried without backing off";

    limit.Restore();
    ASSERT_TRUE(WaitUntil([&] { return accepted.done; }, LoopPasses(io)));
    KJ_IF_MAYBE (e, accepted.error) {
      FAIL() << kj::str(*e).cStr();
    }
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

}  // namespace
}  // namespace dispatch::uvkj::testing
