// Helpers for the bridge's tests: a libuv loop with the whole bridge on it,
// counting loop iterations, connected stream pairs, byte patterns and the
// seed of randomised tests (DISPATCH_TEST_SEED). A test runs its loop until a
// condition holds with WaitUntil(condition, LoopPasses(io)) (tests/support).
#pragma once

#include <kj/async-io.h>
#include <uv.h>

#include <cstdint>
#include <functional>

#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "tests/support/loop_passes.h"
#include "tests/support/wait_until.h"

namespace dispatch::uvkj::testing {

// One UvLoop with a UvAsyncIo on it, destroyed in the documented order:
// the test drops its promises and streams first, then Teardown().
class Bridge {
 public:
  Bridge() : io_(kj::heap<UvAsyncIo>(loop_.get())) {}
  ~Bridge() noexcept(false) = default;

  UvAsyncIo& io() { return *io_; }
  uv_loop_t* loop() { return loop_.get(); }

  // Destroys the bridge and closes the loop; returns uv_loop_close()'s result.
  int Teardown() {
    io_ = nullptr;
    return loop_.Close();
  }

 private:
  UvLoop loop_;
  kj::Own<UvAsyncIo> io_;  // declared last: destroyed before the loop
};

using dispatch::testing::LoopPasses;
using dispatch::testing::WaitUntil;

// Counts libuv loop iterations with an unref'd prepare handle (it never keeps
// the loop alive). A busy-spinning loop makes thousands of them per second.
class LoopCounter {
 public:
  explicit LoopCounter(uv_loop_t* loop);
  ~LoopCounter();
  LoopCounter(const LoopCounter&) = delete;
  LoopCounter& operator=(const LoopCounter&) = delete;
  uint64_t count() const { return count_; }

 private:
  UvHandle<uv_prepare_t> prepare_;
  uint64_t count_ = 0;
};

// Remembers how a promise ended, so a test can run the loop until it did.
template <typename T>
struct Outcome {
  bool done = false;
  kj::Maybe<T> value;
  kj::Maybe<kj::Exception> error;
};
template <>
struct Outcome<void> {
  bool done = false;
  kj::Maybe<kj::Exception> error;
};

template <typename T>
kj::Promise<void> Track(kj::Promise<T>&& promise, Outcome<T>& out) {
  if constexpr (std::is_void_v<T>) {
    return promise
        .then([&out]() { out.done = true; },
              [&out](kj::Exception&& e) {
                out.error = kj::mv(e);
                out.done = true;
              })
        .eagerlyEvaluate(nullptr);
  } else {
    return promise
        .then(
            [&out](T&& v) {
              out.value = kj::mv(v);
              out.done = true;
            },
            [&out](kj::Exception&& e) {
              out.error = kj::mv(e);
              out.done = true;
            })
        .eagerlyEvaluate(nullptr);
  }
}

struct StreamPair {
  kj::Own<kj::AsyncIoStream> a;
  kj::Own<kj::AsyncIoStream> b;
};

// A connected AF_UNIX socketpair, both ends wrapped by the bridge.
StreamPair MakeUnixPair(UvAsyncIo& io);
// A loopback TCP connection made through io.network() (listen, connect,
// accept); `a` is the connecting side, `b` the accepted one.
StreamPair MakeTcpPair(UvAsyncIo& io);

// Shrinks the send buffer of a socket so that large writes hit EAGAIN.
// Loopback TCP crawls (about 5 MB/s) with a 32 KiB send buffer, so TCP
// tests use this one: still dozens of EAGAINs per 4 MiB message.
constexpr int kTcpSendBuffer = 128 << 10;
void ShrinkBuffers(kj::AsyncIoStream& stream, int size = 4096);

// The byte at `offset` of message number `message` of a pattern that makes
// shifted, repeated or dropped ranges visible.
inline kj::byte PatternByte(uint64_t message, uint64_t offset) {
  uint64_t x = (offset + 1) * 0x9E3779B97F4A7C15ull + message * 0xBF58476D1CE4E5B9ull;
  return static_cast<kj::byte>((x ^ (x >> 29)) >> 24);
}
kj::Array<kj::byte> MakePattern(uint64_t message, size_t size);

// The seed of a randomised test: DISPATCH_TEST_SEED if set, else random.
// Printed, so a failing run can be repeated.
uint64_t TestSeed();

}  // namespace dispatch::uvkj::testing
