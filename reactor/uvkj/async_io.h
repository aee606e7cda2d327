// UvAsyncIo: everything one thread needs to run Cap'n Proto on a libuv loop,
// the way kj::setupAsyncIo() does it for KJ's own loop: the event port, the
// WaitScope that makes the KJ loop current, a timer, and a kj::Network.
// Construct on the thread that will call Run(); destroy every promise, RPC
// object and stream before it; then close the UvLoop.
#pragma once

#include <kj/async-io.h>
#include <uv.h>

#include "reactor/uvkj/event_port.h"
#include "reactor/uvkj/io_provider.h"
#include "reactor/uvkj/timer.h"

namespace dispatch::uvkj {

class UvAsyncIo {
 public:
  explicit UvAsyncIo(uv_loop_t* loop);
  ~UvAsyncIo() noexcept(false);
  UvAsyncIo(const UvAsyncIo&) = delete;
  UvAsyncIo& operator=(const UvAsyncIo&) = delete;

  uv_loop_t* loop() { return port_.uv_loop(); }
  UvEventPort& port() { return port_; }
  kj::Timer& timer() { return timer_; }
  kj::AsyncIoProvider& provider() { return *provider_; }
  kj::Network& network() { return provider_->getNetwork(); }
  kj::LowLevelAsyncIoProvider& low_level() { return *low_level_; }

  // For a top-level Promise::wait() (start-up, tests, blocking clients).
  // Throws when called from inside a libuv callback: there, waiting would
  // need a nested uv_run (see UvEventPort::wait()).
  kj::WaitScope& wait_scope();

  // Runs the loop until it has nothing left to do or Stop() is called.
  // REQUIRES: not inside the loop already.
  int Run(uv_run_mode mode = UV_RUN_DEFAULT) { return port_.Run(mode); }
  void Stop() { port_.Stop(); }

 private:
  // The order is the teardown's. The kj::EventLoop (in port_) destroys, as
  // it dies, the promises still detached on it: Cap'n Proto detaches a
  // connection's shutdown, which can hold a server call waiting on a timer
  // or a stream. So the timer and the providers are declared before port_
  // and outlive it; wait_scope_ must die before the loop it is a scope of.
  UvTimer timer_;
  kj::Own<UvLowLevelIoProvider> low_level_;
  kj::Own<kj::AsyncIoProvider> provider_;
  UvEventPort port_;
  kj::WaitScope wait_scope_;
};

}  // namespace dispatch::uvkj
