// ClientLoop: the test's own side of the wire, a libuv loop driving Cap'n
// Proto through the same bridge the product uses. Every wait has a deadline:
// a hung dispatcher fails the test instead of hanging it.
#pragma once

#include <chrono>

#include <kj/async.h>
#include <kj/debug.h>

#include "clients/dispatcher_connection.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"

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

  // Waits until `condition()` holds, re-checking every `every` of loop time
  // (the loop keeps serving I/O meanwhile). Fails the wait past `deadline`.
  template <typename Condition>
  bool WaitUntil(Condition condition, kj::Duration deadline = kDeadline,
                 kj::Duration every = 5 * kj::MILLISECONDS) {
    auto until = io_.timer().now() + deadline;
    while (!condition()) {
      if (io_.timer().now() >= until) return false;
      io_.timer().afterDelay(every).wait(io_.wait_scope());
    }
    return true;
  }

 private:
  uvkj::UvLoop loop_;     // declared first: closed last
  uvkj::UvAsyncIo io_;
};

}  // namespace dispatch::testing
