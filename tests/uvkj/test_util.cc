#include "tests/uvkj/test_util.h"

#include <gtest/gtest.h>
#include <kj/debug.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <random>

namespace dispatch::uvkj::testing {

LoopCounter::LoopCounter(uv_loop_t* loop) : prepare_(loop, this, uv_prepare_init) {
  CheckUv(uv_prepare_start(prepare_.get(),
                           [](uv_prepare_t* p) {
                             if (p->data != nullptr) ++static_cast<LoopCounter*>(p->data)->count_;
                           }),
          "uv_prepare_start");
  uv_unref(prepare_.base());
}

LoopCounter::~LoopCounter() = default;

StreamPair MakeUnixPair(UvAsyncIo& io) {
  int fds[2];
  KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds));
  constexpr uint kFlags = kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP |
                          kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK |
                          kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC;
  StreamPair pair;
  pair.a = io.low_level().wrapSocketFd(fds[0], kFlags);
  pair.b = io.low_level().wrapSocketFd(fds[1], kFlags);
  return pair;
}

StreamPair MakeTcpPair(UvAsyncIo& io) {
  Outcome<kj::Own<kj::NetworkAddress>> parsed;
  auto parsing = Track(io.network().parseAddress("127.0.0.1:0"), parsed);
  KJ_ASSERT(WaitUntil([&] { return parsed.done; }, LoopPasses(io)));
  KJ_IF_MAYBE (e, parsed.error) {
    kj::throwFatalException(kj::mv(*e));
  }
  auto listener = KJ_ASSERT_NONNULL(parsed.value)->listen();

  Outcome<kj::Own<kj::NetworkAddress>> target;
  auto targeting = Track(io.network().parseAddress("127.0.0.1", listener->getPort()), target);
  KJ_ASSERT(WaitUntil([&] { return target.done; }, LoopPasses(io)));
  auto& address = *KJ_ASSERT_NONNULL(target.value);

  Outcome<kj::Own<kj::AsyncIoStream>> connected;
  Outcome<kj::Own<kj::AsyncIoStream>> accepted;
  auto connecting = Track(address.connect(), connected);
  auto accepting = Track(listener->accept(), accepted);
  KJ_ASSERT(WaitUntil([&] { return connected.done && accepted.done; }, LoopPasses(io)));
  KJ_IF_MAYBE (e, connected.error) {
    kj::throwFatalException(kj::mv(*e));
  }
  KJ_IF_MAYBE (e, accepted.error) {
    kj::throwFatalException(kj::mv(*e));
  }
  StreamPair pair;
  pair.a = kj::mv(KJ_ASSERT_NONNULL(connected.value));
  pair.b = kj::mv(KJ_ASSERT_NONNULL(accepted.value));
  return pair;
}

void ShrinkBuffers(kj::AsyncIoStream& stream, int size) {
  // Only the send side: shrinking SO_RCVBUF of a connected TCP socket below
  // the window it already advertised makes the kernel drop and retransmit.
  // The kernel doubles `size` and applies its minimum.
  stream.setsockopt(SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
}

kj::Array<kj::byte> MakePattern(uint64_t message, size_t size) {
  auto bytes = kj::heapArray<kj::byte>(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = PatternByte(message, i);
  return bytes;
}

uint64_t TestSeed() {
  uint64_t seed;
  if (const char* env = std::getenv("DISPATCH_TEST_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = std::random_device()();
  }
  std::printf("DISPATCH_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

}  // namespace dispatch::uvkj::testing
