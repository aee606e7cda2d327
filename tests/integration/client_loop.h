// ClientLoop: the test's own side of the wire, a libuv loop driving Cap'n
// Proto through the same bridge the product uses. Every wait has a deadline:
// a hung dispatcher fails the test instead of hanging it. A condition is
// waited for with WaitUntil(condition, loop).
#pragma once

#include <kj/async.h>
#include <kj/debug.h>

#include <algorithm>
#include <chrono>

#include "clients/dispatcher_connection.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {

inline constexpr auto kDeadline = 30 * kj::SECONDS;

class ClientLoop {
 public:
  ClientLoop() : io_(loop_.get()) {}

  uvkj::UvAsyncIo& io() { return io_; }
  kj::WaitScope& wait_scope() { return io_.wait_scope(); }

  // Waits for `promise`, failing with a timeout exception past `deadline`.
  template <typename T>
  T Wait(kj::Promise<T> promise, kj::Duration deadline = kDeadline) {
    return io_.timer().timeoutAfter(deadline, kj::mv(promise)).wait(io_.wait_scope());
  }

  kj::Own<clients::DispatcherConnection> Connect(kj::StringPtr address, kj::StringPtr token = "") {
    return Wait(clients::DispatcherConnection::Connect(io_.network(), address, token));
  }

  // WaitUntil's `between` (tests/support/wait_until.h): runs this loop, its
  // I/O and timers, for a poll interval or until the deadline.
  //   ASSERT_TRUE(WaitUntil([&] { return job->job_finished(); }, loop));
  void Turn(const WaitCondition& condition, std::chrono::milliseconds left) {
    Every(kPollInterval).Turn(condition, left);
  }
  // The same at a slower pace, for a condition that is costly to check.
  //   WaitUntil([&] { return Finished() >= n; }, loop.Every(50ms), 1h);
  struct Paced {
    ClientLoop& loop;
    std::chrono::milliseconds every;
    void Turn(const WaitCondition&, std::chrono::milliseconds left) {
      const auto pause = std::min(left, every);
      loop.io().timer().afterDelay(pause.count() * kj::MILLISECONDS).wait(loop.wait_scope());
    }
  };
  Paced Every(std::chrono::milliseconds every) { return Paced{*this, every}; }

 private:
  uvkj::UvLoop loop_;     // declared first: closed last
  uvkj::UvAsyncIo io_;
};

}  // namespace dispatch::testing
