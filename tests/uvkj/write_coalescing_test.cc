// UvSocketStream's write buffer: small writes of one loop pass leave in one
// system call, in order, also behind a flush blocked on EAGAIN and in front
// of a large write; shutdownWrite and destruction send what is buffered; a
// failed flush fails the writes after it.
#include <gtest/gtest.h>
#include <kj/debug.h>
#include <kj/io.h>
#include <kj/vector.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "reactor/uvkj/socket_stream.h"
#include "tests/uvkj/test_util.h"

namespace dispatch::uvkj::testing {
namespace {

// An AF_UNIX socketpair with only one end wrapped; the test reads the other
// end with plain system calls.
struct RawPeer {
  kj::Own<kj::AsyncIoStream> stream;
  kj::AutoCloseFd peer;
  UvSocketStream& uv() { return kj::downcast<UvSocketStream>(*stream); }
};

RawPeer MakeRawPeer(UvAsyncIo& io) {
  int fds[2];
  KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds));
  RawPeer pair;
  pair.peer = kj::AutoCloseFd(fds[1]);
  pair.stream = io.low_level().wrapSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  return pair;
}

size_t Queued(int fd) {
  int queued = 0;
  KJ_SYSCALL(ioctl(fd, FIONREAD, &queued));
  return queued;
}

std::string ReadAvailable(int fd) {
  std::string out;
  char buffer[65536];
  for (;;) {
    ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n <= 0) break;
    out.append(buffer, n);
  }
  return out;
}

// The peer has exactly `text` queued, then the end of the stream.
void ExpectBytesThenEnd(int fd, const std::string& text) {
  char buffer[64];
  ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
  ASSERT_EQ(n, static_cast<ssize_t>(text.size()));
  EXPECT_EQ(std::string(buffer, n), text);
  EXPECT_EQ(recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT), 0);
}

// Writes each string once the previous write resolved, as Cap'n Proto's
// connection does with its messages.
kj::Promise<void> WriteInTurn(kj::AsyncOutputStream& out, const std::vector<std::string>& parts,
                              size_t next = 0) {
  if (next == parts.size()) return kj::READY_NOW;
  return out.write(parts[next].data(), parts[next].size()).then([&out, &parts, next]() {
    return WriteInTurn(out, parts, next + 1);
  });
}

TEST(WriteCoalescing, SmallWritesOfOnePassLeaveInOneSystemCallInOrder) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    RawPeer pair = MakeRawPeer(io);
    std::vector<std::string> parts;
    std::string expected;
    for (int i = 0; i < 10; ++i) {
      parts.push_back("message " + std::to_string(i) + ";");
      expected += parts.back();
    }
    Outcome<void> wrote;
    auto writing = Track(WriteInTurn(*pair.stream, parts), wrote);
    ASSERT_TRUE(WaitUntil([&] { return wrote.done && Queued(pair.peer.get()) == expected.size(); },
                          LoopPasses(io)));
    EXPECT_TRUE(wrote.error == nullptr);
    EXPECT_EQ(pair.uv().send_calls(), 1u);
    EXPECT_EQ(ReadAvailable(pair.peer.get()), expected);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(WriteCoalescing, ALargeWriteTakesTheBufferedBytesInFrontOfIt) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    RawPeer pair = MakeRawPeer(io);
    auto large = MakePattern(7, 64 << 10);
    std::string expected = "head;";
    expected.append(reinterpret_cast<const char*>(large.begin()), large.size());
    Outcome<void> wrote;
    auto writing = Track(pair.stream->write("head;", 5).then([&]() {
      return pair.stream->write(large.begin(), large.size());
    }),
                         wrote);
    std::string received;
    ASSERT_TRUE(WaitUntil(
        [&] {
          received += ReadAvailable(pair.peer.get());
          return wrote.done && received.size() >= expected.size();
        },
        LoopPasses(io)));
    EXPECT_TRUE(wrote.error == nullptr);
    EXPECT_TRUE(received == expected) << "received " << received.size() << " bytes";
    EXPECT_EQ(pair.uv().send_calls(), 1u);  // both in one sendmsg
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

// The first messages fill the socket and their flush waits on EAGAIN; more
// small and large writes come in later passes and queue behind it. The
// reader must see the exact concatenation.
void WriteBehindABlockedFlushAndReadBack(uint64_t seed) {
  Bridge bridge;
  auto& io = bridge.io();
  std::mt19937_64 rng(seed);
  {
    auto pair = MakeUnixPair(io);
    ShrinkBuffers(*pair.a);
    ShrinkBuffers(*pair.b);
    auto& uv = kj::downcast<UvSocketStream>(*pair.a);
    std::vector<std::string> first;
    std::vector<std::string> later;
    std::string expected;
    for (int i = 0; i < 420; ++i) {
      size_t size = i % 25 == 24 ? 40000 + rng() % 30000 : 1 + rng() % 3000;
      auto bytes = MakePattern(i, size);
      (i < 20 ? first : later).emplace_back(reinterpret_cast<const char*>(bytes.begin()), size);
      expected.append(reinterpret_cast<const char*>(bytes.begin()), size);
    }
    Outcome<void> wrote_first;
    auto writing_first = Track(WriteInTurn(*pair.a, first), wrote_first);
    io.port().kj_loop().run();
    ASSERT_TRUE(wrote_first.done);  // accepted into the buffer...
    ASSERT_GE(uv.send_calls(), 1u);  // ...whose flush the full socket stopped
    Outcome<void> wrote;
    auto writing = Track(WriteInTurn(*pair.a, later), wrote);
    io.port().kj_loop().run();
    EXPECT_FALSE(wrote.done);  // stuck until someone reads

    std::string received;
    kj::Array<kj::byte> buffer = kj::heapArray<kj::byte>(4096);
    bool reading = false;
    bool ended = false;
    kj::Promise<void> read = kj::READY_NOW;
    ASSERT_TRUE(WaitUntil(
        [&] {
          if (!reading && !ended) {
            reading = true;
            read = pair.b->tryRead(buffer.begin(), 1, 1 + rng() % buffer.size())
                       .then([&](size_t n) {
                         if (n == 0) ended = true;
                         received.append(reinterpret_cast<const char*>(buffer.begin()), n);
                         reading = false;
                       })
                       .eagerlyEvaluate(nullptr);
          }
          return wrote.done && received.size() >= expected.size();
        },
        LoopPasses(io)))
        << "seed " << seed;
    EXPECT_TRUE(wrote.error == nullptr);
    ASSERT_EQ(received.size(), expected.size()) << "seed " << seed;
    EXPECT_TRUE(received == expected) << "seed " << seed;
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(WriteCoalescing, WritesBehindABlockedFlushArriveInOrder) {
  WriteBehindABlockedFlushAndReadBack(TestSeed());
}

// This seed once made a one-buffer write wait and resume through a pieces
// array on a stack frame that had returned: 1,070 bytes too many, or a hang.
TEST(WriteCoalescing, AOneBufferWriteThatWaitsSendsItsOwnBytes) {
  WriteBehindABlockedFlushAndReadBack(1398285442);
}

TEST(WriteCoalescing, ShutdownWriteSendsTheBufferedBytesBeforeTheEnd) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    RawPeer pair = MakeRawPeer(io);
    Outcome<void> wrote;
    auto writing = Track(pair.stream->write("goodbye", 7), wrote);
    EXPECT_EQ(pair.uv().send_calls(), 0u);  // still buffered
    pair.stream->shutdownWrite();
    ExpectBytesThenEnd(pair.peer.get(), "goodbye");
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(WriteCoalescing, DestroyingTheStreamSendsTheBufferedBytes) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    RawPeer pair = MakeRawPeer(io);
    {
      Outcome<void> wrote;
      auto writing = Track(pair.stream->write("last words", 10), wrote);
      pair.stream = nullptr;
    }
    ExpectBytesThenEnd(pair.peer.get(), "last words");
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(WriteCoalescing, AFailedFlushFailsTheNextWriteAsDisconnected) {
  signal(SIGPIPE, SIG_DFL);  // a send without MSG_NOSIGNAL would kill the test
  Bridge bridge;
  auto& io = bridge.io();
  {
    RawPeer pair = MakeRawPeer(io);
    pair.peer = nullptr;  // the peer is gone before anything is sent
    auto& uv = pair.uv();
    Outcome<void> first;
    auto writing = Track(pair.stream->write("into the void", 13), first);
    ASSERT_TRUE(WaitUntil([&] { return first.done && uv.send_calls() == 1; }, LoopPasses(io)));
    EXPECT_TRUE(first.error == nullptr);  // accepted into the buffer

    Outcome<void> second;
    auto writing_again = Track(pair.stream->write("again", 5), second);
    ASSERT_TRUE(WaitUntil([&] { return second.done; }, LoopPasses(io)));
    KJ_IF_MAYBE (e, second.error) {
      EXPECT_EQ(e->getType(), kj::Exception::Type::DISCONNECTED) << kj::str(*e).cStr();
    } else {
      ADD_FAILURE() << "a write after a failed flush succeeded";
    }
    EXPECT_EQ(uv.send_calls(), 1u);  // refused without asking the kernel
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

}  // namespace
}  // namespace dispatch::uvkj::testing
