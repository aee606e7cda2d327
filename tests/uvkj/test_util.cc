#include "tests/uvkj/test_util.h"

#include <gtest/gtest.h>
#include <kj/debug.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <random>

namespace dispatch::uvkj::testing {

bool RunUntil(UvAsyncIo& io, const std::function<bool()>& done, uint64_t deadline_ms) {
  if (done()) return true;
  bool expired = false;
  UvHandle<uv_timer_t> deadline(io.loop(), &expired, uv_timer_init);
  CheckUv(uv_timer_start(
              deadline.get(),
              [](uv_timer_t* t) {
                if (t->data != nullptr) *static_cast<bool*>(t->data) = true;
              },
              deadline_ms, 0),
          "uv_timer_start");
  // A condition that a libuv callback made true early in a pass would
  // otherwise be seen only after the pass has blocked for the next event:
  // check it before each poll phase and stop the pass from blocking.
  UvHandle<uv_prepare_t> check(io.loop(), const_cast<std::function<bool()>*>(&done),
                               uv_prepare_init);
  CheckUv(uv_prepare_start(check.get(),
                           [](uv_prepare_t* p) {
                             auto* condition = static_cast<std::function<bool()>*>(p->data);
                             if (condition != nullptr && (*condition)()) uv_stop(p->loop);
                           }),
          "uv_prepare_start");
  uv_unref(check.base());
  while (!done() && !expired) io.Run(UV_RUN_ONCE);
  return done();
}

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
  KJ_ASSERT(RunUntil(io, [&] { return parsed.done; }));
  KJ_IF_MAYBE (e, parsed.error) {
    kj::throwFatalException(kj::mv(*e));
  }
  auto listener = KJ_ASSERT_NONNULL(parsed.value)->listen();

  Outcome<kj::Own<kj::NetworkAddress>> target;
  auto targeting = Track(io.network().parseAddress("127.0.0.1", listener->getPort()), target);
  KJ_ASSERT(RunUntil(io, [&] { return target.done; }));
  auto& address = *KJ_ASSERT_NONNULL(target.value);

  Outcome<kj::Own<kj::AsyncIoStream>> connected;
  Outcome<kj::Own<kj::AsyncIoStream>> accepted;
  auto connecting = Track(address.connect(), connected);
  auto accepting = Track(listener->accept(), accepted);
  KJ_ASSERT(RunUntil(io, [&] { return connected.done && accepted.done; }));
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
