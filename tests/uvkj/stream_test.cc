// UvSocketStream: large writes that go through partial writes and EAGAIN,
// Cap'n Proto messages of 4 MiB, peer reset, half-close, descriptor reuse,
// no recv just to hear EAGAIN after a read that drained the socket.
#include <capnp/message.h>
#include <capnp/serialize-async.h>
#include <gtest/gtest.h>
#include <kj/debug.h>
#include <kj/io.h>
#include <kj/vector.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "reactor/uvkj/repeating_timer.h"
#include "reactor/uvkj/socket_stream.h"
#include "tests/uvkj/test_util.h"

namespace dispatch::uvkj::testing {
namespace {

constexpr size_t kMessage = 4 << 20;  // 4 MiB

// Reads messages of the pattern in random small chunks, yielding to the loop
// after every chunk, and counts bytes that differ from the pattern.
class SlowReader {
 public:
  SlowReader(kj::AsyncInputStream& in, uint64_t seed, size_t max_chunk)
      : in_(in), rng_(seed), max_chunk_(max_chunk), buffer_(kj::heapArray<kj::byte>(max_chunk)) {}

  kj::Promise<void> Read(uint64_t message, size_t offset, size_t total) {
    if (offset == total) return kj::READY_NOW;
    size_t want = std::min<size_t>(total - offset, 1 + rng_() % max_chunk_);
    return in_.tryRead(buffer_.begin(), 1, want)
        .then([this, message, offset, total](size_t n) -> kj::Promise<void> {
          KJ_ASSERT(n > 0, "end of stream before the whole message arrived", message, offset);
          for (size_t i = 0; i < n; ++i) {
            if (buffer_[i] != PatternByte(message, offset + i)) {
              if (mismatches_++ == 0) first_mismatch_ = offset + i;
            }
          }
          ++reads_;
          return kj::evalLater(
              [this, message, offset, n, total]() { return Read(message, offset + n, total); });
        });
  }

  uint64_t mismatches() const { return mismatches_; }
  uint64_t first_mismatch() const { return first_mismatch_; }
  uint64_t reads() const { return reads_; }

 private:
  kj::AsyncInputStream& in_;
  std::mt19937_64 rng_;
  const size_t max_chunk_;
  kj::Array<kj::byte> buffer_;
  uint64_t mismatches_ = 0;
  uint64_t first_mismatch_ = 0;
  uint64_t reads_ = 0;
};

size_t QueuedToRead(kj::AsyncIoStream& stream) {
  int queued = 0;
  KJ_SYSCALL(ioctl(KJ_ASSERT_NONNULL(stream.getFd()), FIONREAD, &queued));
  return queued;
}

TEST(UvSocketStream, PartialWritesOf4MiBArriveWholeThroughASlowReader) {
  Bridge bridge;
  auto& io = bridge.io();
  uint64_t seed = TestSeed();
  {
    auto pair = MakeUnixPair(io);
    ShrinkBuffers(*pair.a);
    ShrinkBuffers(*pair.b);
    auto message = MakePattern(0, kMessage);

    Outcome<void> wrote;
    auto writing = Track(pair.a->write(message.begin(), message.size()), wrote);
    // The kernel took only part of it and the rest waits on EAGAIN: running
    // every KJ event there is cannot finish the write while nobody reads.
    io.port().kj_loop().run();
    EXPECT_FALSE(wrote.done);
    EXPECT_LT(QueuedToRead(*pair.b), kMessage);

    SlowReader reader(*pair.b, seed, 4096);
    Outcome<void> read;
    auto reading = Track(reader.Read(0, 0, kMessage), read);
    ASSERT_TRUE(WaitUntil([&] { return wrote.done && read.done; }, LoopPasses(io)));
    EXPECT_TRUE(wrote.error == nullptr);
    KJ_IF_MAYBE (e, read.error) {
      FAIL() << kj::str(*e).cStr();
    }
    EXPECT_EQ(reader.mismatches(), 0u) << "first wrong byte at " << reader.first_mismatch();
    EXPECT_GT(reader.reads(), 1000u);  // really read in small pieces
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvSocketStream, SeveralPieceWiseWritesOf4MiBOverTcpArriveInOrder) {
  Bridge bridge;
  auto& io = bridge.io();
  uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kMessages = 3;
  {
    auto pair = MakeTcpPair(io);
    ShrinkBuffers(*pair.a, kTcpSendBuffer);
    ShrinkBuffers(*pair.b, kTcpSendBuffer);

    // Each message is cut into more pieces than IOV_MAX, some of them empty,
    // so writes stop inside pieces and between batches of iovecs.
    std::vector<kj::Array<kj::byte>> messages;
    std::vector<kj::Array<kj::ArrayPtr<const kj::byte>>> pieces;
    for (int m = 0; m < kMessages; ++m) {
      messages.push_back(MakePattern(m, kMessage));
      kj::Vector<kj::ArrayPtr<const kj::byte>> cut;
      size_t at = 0;
      while (at < kMessage) {
        size_t len = std::min<size_t>(kMessage - at, rng() % 5 == 0 ? 0 : rng() % 4096);
        cut.add(messages.back().slice(at, at + len));
        at += len;
      }
      ASSERT_GT(cut.size(), static_cast<size_t>(IOV_MAX));
      pieces.push_back(cut.releaseAsArray());
    }

    kj::Promise<void> chain = kj::READY_NOW;
    for (int m = 0; m < kMessages; ++m) {
      chain = chain.then([&, m]() { return pair.a->write(pieces[m]); });
    }
    Outcome<void> wrote;
    auto writing = Track(kj::mv(chain), wrote);
    io.port().kj_loop().run();
    EXPECT_FALSE(wrote.done);  // stuck on EAGAIN until someone reads

    SlowReader reader(*pair.b, seed + 1, 16384);
    kj::Promise<void> reads = kj::READY_NOW;
    for (int m = 0; m < kMessages; ++m) {
      reads = reads.then([&, m]() { return reader.Read(m, 0, kMessage); });
    }
    Outcome<void> read;
    auto reading = Track(kj::mv(reads), read);
    ASSERT_TRUE(WaitUntil([&] { return wrote.done && read.done; }, LoopPasses(io)));
    KJ_IF_MAYBE (e, wrote.error) {
      FAIL() << kj::str(*e).cStr();
    }
    KJ_IF_MAYBE (e, read.error) {
      FAIL() << kj::str(*e).cStr();
    }
    EXPECT_EQ(reader.mismatches(), 0u) << "first wrong byte at " << reader.first_mismatch();
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvSocketStream, CapnProtoMessagesOf4MiBRoundTrip) {
  Bridge bridge;
  auto& io = bridge.io();
  constexpr int kMessages = 3;
  {
    auto pair = MakeTcpPair(io);
    ShrinkBuffers(*pair.a, kTcpSendBuffer);
    ShrinkBuffers(*pair.b, kTcpSendBuffer);

    std::vector<kj::Own<capnp::MallocMessageBuilder>> builders;
    for (int m = 0; m < kMessages; ++m) {
      auto builder = kj::heap<capnp::MallocMessageBuilder>();
      auto data = builder->getRoot<capnp::AnyPointer>().initAs<capnp::Data>(kMessage);
      for (size_t i = 0; i < kMessage; ++i) data[i] = PatternByte(m + 10, i);
      builders.push_back(kj::mv(builder));
    }
    kj::Promise<void> writes = kj::READY_NOW;
    for (int m = 0; m < kMessages; ++m) {
      writes = writes.then([&, m]() { return capnp::writeMessage(*pair.a, *builders[m]); });
    }
    Outcome<void> wrote;
    auto writing = Track(kj::mv(writes), wrote);
    io.port().kj_loop().run();
    EXPECT_FALSE(wrote.done);  // stuck on EAGAIN until someone reads

    uint64_t mismatches = 0;
    int received = 0;
    kj::Promise<void> reads = kj::READY_NOW;
    for (int m = 0; m < kMessages; ++m) {
      reads = reads.then([&, m]() {
        return capnp::readMessage(*pair.b).then([&, m](kj::Own<capnp::MessageReader>&& reader) {
          auto data = reader->getRoot<capnp::AnyPointer>().getAs<capnp::Data>();
          KJ_ASSERT(data.size() == kMessage, data.size());
          for (size_t i = 0; i < kMessage; ++i) mismatches += data[i] != PatternByte(m + 10, i);
          ++received;
        });
      });
    }
    Outcome<void> read;
    auto reading = Track(kj::mv(reads), read);
    ASSERT_TRUE(WaitUntil([&] { return wrote.done && read.done; }, LoopPasses(io)));
    KJ_IF_MAYBE (e, wrote.error) {
      FAIL() << kj::str(*e).cStr();
    }
    KJ_IF_MAYBE (e, read.error) {
      FAIL() << kj::str(*e).cStr();
    }
    EXPECT_EQ(received, kMessages);
    EXPECT_EQ(mismatches, 0u);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

void ResetOnClose(kj::AsyncIoStream& stream) {
  struct linger lg = {1, 0};  // close() sends RST instead of FIN
  stream.setsockopt(SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

kj::Exception::Type TypeOf(const kj::Maybe<kj::Exception>& error) {
  KJ_IF_MAYBE (e, error) {
    return e->getType();
  }
  ADD_FAILURE() << "expected an exception";
  return kj::Exception::Type::FAILED;
}

TEST(UvSocketStream, PeerResetRejectsThePendingReadAndLaterWritesAsDisconnected) {
  signal(SIGPIPE, SIG_DFL);  // a write without MSG_NOSIGNAL would kill the test
  Bridge bridge;
  auto& io = bridge.io();
  {
    auto pair = MakeTcpPair(io);
    kj::byte buffer[16];
    Outcome<size_t> read;
    auto reading = Track(pair.b->tryRead(buffer, 1, sizeof(buffer)), read);
    Outcome<void> hangup;
    auto hanging = Track(pair.b->whenWriteDisconnected(), hangup);
    io.port().kj_loop().run();
    ASSERT_FALSE(read.done);

    ResetOnClose(*pair.a);
    pair.a = nullptr;
    ASSERT_TRUE(WaitUntil([&] { return read.done && hangup.done; }, LoopPasses(io)));
    EXPECT_EQ(TypeOf(read.error), kj::Exception::Type::DISCONNECTED);

    for (int i = 0; i < 3; ++i) {
      Outcome<void> wrote;
      auto writing = Track(pair.b->write("after reset", 11), wrote);
      ASSERT_TRUE(WaitUntil([&] { return wrote.done; }, LoopPasses(io)));
      EXPECT_EQ(TypeOf(wrote.error), kj::Exception::Type::DISCONNECTED);
    }
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvSocketStream, PeerResetRejectsAWriteWaitingOnEagain) {
  signal(SIGPIPE, SIG_DFL);
  Bridge bridge;
  auto& io = bridge.io();
  {
    auto pair = MakeTcpPair(io);
    ShrinkBuffers(*pair.a, kTcpSendBuffer);
    ShrinkBuffers(*pair.b, kTcpSendBuffer);
    auto message = MakePattern(1, kMessage);
    // Only the writer's descriptor is watched, and only for writability:
    // the reset must still reach the waiting write.
    Outcome<void> wrote;
    auto writing = Track(pair.b->write(message.begin(), message.size()), wrote);
    io.port().kj_loop().run();
    ASSERT_FALSE(wrote.done);

    ResetOnClose(*pair.a);
    pair.a = nullptr;
    ASSERT_TRUE(WaitUntil([&] { return wrote.done; }, LoopPasses(io)));
    EXPECT_EQ(TypeOf(wrote.error), kj::Exception::Type::DISCONNECTED);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

void CheckHalfClose(UvAsyncIo& io, StreamPair& pair) {
  pair.a->shutdownWrite();
  kj::byte buffer[16];
  for (int i = 0; i < 2; ++i) {  // end of stream is reported again, not once
    Outcome<size_t> eof;
    auto reading = Track(pair.b->tryRead(buffer, 1, sizeof(buffer)), eof);
    ASSERT_TRUE(WaitUntil([&] { return eof.done; }, LoopPasses(io)));
    EXPECT_TRUE(eof.error == nullptr);
    EXPECT_EQ(KJ_ASSERT_NONNULL(eof.value), 0u);
  }

  // The other direction still works both ways of reading it.
  Outcome<void> wrote;
  auto writing = Track(pair.b->write("pong", 4), wrote);
  Outcome<size_t> got;
  auto getting = Track(pair.a->tryRead(buffer, 4, sizeof(buffer)), got);
  ASSERT_TRUE(WaitUntil([&] { return wrote.done && got.done; }, LoopPasses(io)));
  EXPECT_TRUE(wrote.error == nullptr);
  ASSERT_EQ(KJ_ASSERT_NONNULL(got.value), 4u);
  EXPECT_EQ(kj::str(kj::arrayPtr(reinterpret_cast<char*>(buffer), 4)), "pong");

  // Writing on the shut side fails cleanly instead of raising SIGPIPE.
  Outcome<void> late;
  auto writing_late = Track(pair.a->write("late", 4), late);
  ASSERT_TRUE(WaitUntil([&] { return late.done; }, LoopPasses(io)));
  EXPECT_EQ(TypeOf(late.error), kj::Exception::Type::DISCONNECTED);

  pair.b->shutdownWrite();
  Outcome<size_t> eof;
  auto reading = Track(pair.a->tryRead(buffer, 1, sizeof(buffer)), eof);
  ASSERT_TRUE(WaitUntil([&] { return eof.done; }, LoopPasses(io)));
  EXPECT_EQ(KJ_ASSERT_NONNULL(eof.value), 0u);
}

TEST(UvSocketStream, HalfCloseOverUnixSocketsGivesEofAndKeepsTheOtherDirection) {
  signal(SIGPIPE, SIG_DFL);
  Bridge bridge;
  {
    auto pair = MakeUnixPair(bridge.io());
    CheckHalfClose(bridge.io(), pair);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvSocketStream, HalfCloseOverTcpGivesEofAndKeepsTheOtherDirection) {
  signal(SIGPIPE, SIG_DFL);
  Bridge bridge;
  {
    auto pair = MakeTcpPair(bridge.io());
    CheckHalfClose(bridge.io(), pair);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvSocketStream, ReusedDescriptorNumberWorksAndTheOldWatchIsGone) {
  Bridge bridge;
  auto& io = bridge.io();
  constexpr uint kFlags = kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP;
  {
    int first[2];
    KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, first));
    kj::AutoCloseFd old_peer(first[1]);
    int old_fd = first[0];
    auto old_stream = io.low_level().wrapSocketFd(old_fd, kFlags);
    {
      // Put the old descriptor into epoll with a read that then goes away.
      kj::byte buffer[8];
      Outcome<size_t> read;
      auto reading = Track(old_stream->tryRead(buffer, 1, sizeof(buffer)), read);
      io.Run(UV_RUN_NOWAIT);
      ASSERT_FALSE(read.done);
    }
    // A dup keeps the old socket itself open: a watch left behind in epoll
    // would go on reporting it under the old number.
    kj::AutoCloseFd old_alive(dup(old_fd));
    old_stream = nullptr;  // closes old_fd; no loop pass in between

    int second[2];
    KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, second));
    kj::AutoCloseFd new_peer(second[1]);
    ASSERT_EQ(second[0], old_fd) << "the kernel did not reuse the descriptor number";
    // uv_poll_init fails with EEXIST if the old handle still held the number.
    auto new_stream = io.low_level().wrapSocketFd(second[0], kFlags);

    KJ_SYSCALL(write(old_peer.get(), "stale", 5));  // the old socket is now readable
    KJ_SYSCALL(write(new_peer.get(), "fresh", 5));
    kj::byte buffer[8];
    Outcome<size_t> read;
    auto reading = Track(new_stream->tryRead(buffer, 5, sizeof(buffer)), read);
    ASSERT_TRUE(WaitUntil([&] { return read.done; }, LoopPasses(io)));
    ASSERT_EQ(KJ_ASSERT_NONNULL(read.value), 5u);
    EXPECT_EQ(kj::str(kj::arrayPtr(reinterpret_cast<char*>(buffer), 5)), "fresh");

    // With a read pending on the new socket and the old one readable, the
    // loop must sleep between timer ticks; a stale level-triggered watch
    // would wake it without end.
    Outcome<size_t> pending;
    auto waiting = Track(new_stream->tryRead(buffer, 1, sizeof(buffer)), pending);
    LoopCounter iterations(io.loop());
    UvRepeatingTimer tick(io.loop(), 5, [] {});
    tick.Start();
    ASSERT_TRUE(WaitUntil([&] { return tick.ticks() >= 10; }, LoopPasses(io)));
    EXPECT_FALSE(pending.done);
    EXPECT_LT(iterations.count(), 3 * tick.ticks() + 10);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvSocketStream, TopLevelWaitOnAWriteThatHitsEagainReturns) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    int fds[2];
    KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds));
    kj::AutoCloseFd peer(fds[1]);
    auto stream = io.low_level().wrapSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    ShrinkBuffers(*stream);
    auto message = MakePattern(2, kMessage);

    // A blocking reader on another thread: the loop watches nothing but the
    // writer, so the last writable event leaves no active handle behind.
    uint64_t mismatches = 0;
    size_t total = 0;
    std::thread reader([&]() {
      kj::byte buffer[2048];
      while (total < kMessage) {
        ssize_t n = ::read(peer.get(), buffer, sizeof(buffer));
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; ++i) mismatches += buffer[i] != PatternByte(2, total + i);
        total += n;
      }
    });
    auto error = kj::runCatchingExceptions(
        [&]() { stream->write(message.begin(), message.size()).wait(io.wait_scope()); });
    if (error != nullptr) ::shutdown(peer.get(), SHUT_RDWR);  // unblock the reader
    reader.join();
    KJ_IF_MAYBE (e, error) {
      FAIL() << kj::str(*e).cStr();
    }
    EXPECT_EQ(total, kMessage);
    EXPECT_EQ(mismatches, 0u);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

// A read that returns fewer bytes than asked for has emptied the socket: the
// next read waits for readiness instead of making a recv that would only say
// EAGAIN, and still gets what the peer writes later.
TEST(UvSocketStream, AReadAfterAShortReadWaitsWithoutARecvAndGetsLaterBytes) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    int fds[2];
    KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds));
    kj::AutoCloseFd peer(fds[1]);
    auto stream = io.low_level().wrapSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    auto& uv_stream = kj::downcast<UvSocketStream>(*stream);
    KJ_SYSCALL(::write(peer.get(), "0123456789", 10));

    char buffer[64];
    Outcome<size_t> first;
    auto reading = Track(stream->tryRead(buffer, 1, sizeof(buffer)), first);
    ASSERT_TRUE(WaitUntil([&] { return first.done; }, LoopPasses(io)));
    EXPECT_EQ(KJ_ASSERT_NONNULL(first.value), 10u);
    EXPECT_EQ(std::string(buffer, 10), "0123456789");
    EXPECT_EQ(uv_stream.recv_calls(), 1u);

    Outcome<size_t> second;
    auto reading_again = Track(stream->tryRead(buffer, 1, sizeof(buffer)), second);
    io.Run(UV_RUN_NOWAIT);
    EXPECT_FALSE(second.done);
    EXPECT_EQ(uv_stream.recv_calls(), 1u);  // no recv just to hear EAGAIN

    KJ_SYSCALL(::write(peer.get(), "abc", 3));
    ASSERT_TRUE(WaitUntil([&] { return second.done; }, LoopPasses(io)));
    EXPECT_EQ(KJ_ASSERT_NONNULL(second.value), 3u);
    EXPECT_EQ(std::string(buffer, 3), "abc");
    EXPECT_EQ(uv_stream.recv_calls(), 2u);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

// Bytes that arrive between a short read and the next read are not missed:
// readiness is level-triggered, so the wait ends at once.
TEST(UvSocketStream, BytesArrivingRightAfterAShortReadAreReadInOrder) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    int fds[2];
    KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds));
    kj::AutoCloseFd peer(fds[1]);
    auto stream = io.low_level().wrapSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    std::string received;
    for (int round = 0; round < 100; ++round) {
      std::string sent = "round " + std::to_string(round) + ";";
      KJ_SYSCALL(::write(peer.get(), sent.data(), sent.size()));
      char buffer[64];
      Outcome<size_t> got;
      auto reading = Track(stream->tryRead(buffer, 1, sizeof(buffer)), got);
      ASSERT_TRUE(WaitUntil([&] { return got.done; }, LoopPasses(io)));
      ASSERT_TRUE(got.error == nullptr);
      received.append(buffer, KJ_ASSERT_NONNULL(got.value));
    }
    // Whatever is still queued (none is expected) comes in order too.
    std::string expected;
    for (int round = 0; round < 100; ++round) expected += "round " + std::to_string(round) + ";";
    while (received.size() < expected.size()) {
      char buffer[64];
      Outcome<size_t> got;
      auto reading = Track(stream->tryRead(buffer, 1, sizeof(buffer)), got);
      ASSERT_TRUE(WaitUntil([&] { return got.done; }, LoopPasses(io)));
      ASSERT_GT(KJ_ASSERT_NONNULL(got.value), 0u);
      received.append(buffer, KJ_ASSERT_NONNULL(got.value));
    }
    EXPECT_EQ(received, expected);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

}  // namespace
}  // namespace dispatch::uvkj::testing
