// UvConnectionReceiver: accepts connections on a listening socket whose
// readiness comes from libuv. Accepted sockets are non-blocking and
// close-on-exec from the start (accept4), TCP ones get TCP_NODELAY (RPC is
// latency-bound). Transient accept errors are retried; running out of
// descriptors or memory backs off briefly instead of spinning.
#pragma once

#include <uv.h>

#include <kj/async-io.h>
#include <kj/io.h>
#include <kj/timer.h>

#include "reactor/uvkj/fd_watcher.h"

namespace dispatch::uvkj {

class UvConnectionReceiver final : public kj::ConnectionReceiver {
 public:
  // Takes ownership of `fd`, which must already be bound and listening.
  UvConnectionReceiver(uv_loop_t* loop, kj::Timer& timer, int fd,
                       kj::LowLevelAsyncIoProvider::NetworkFilter& filter);
  ~UvConnectionReceiver() noexcept(false);

  kj::Promise<kj::Own<kj::AsyncIoStream>> accept() override;
  uint getPort() override;
  void getsockopt(int level, int option, void* value, uint* length) override;
  void setsockopt(int level, int option, const void* value, uint length) override;
  void getsockname(struct sockaddr* addr, uint* length) override;

 private:
  kj::Promise<kj::Own<kj::AsyncIoStream>> AcceptLoop();

  uv_loop_t* const loop_;
  kj::Timer& timer_;
  kj::LowLevelAsyncIoProvider::NetworkFilter& filter_;
  kj::AutoCloseFd fd_;
  UvFdWatcher watcher_;  // declared after fd_: stops watching before the close
};

// Sets TCP_NODELAY when `fd` is a TCP socket; a no-op for Unix sockets.
void SetNoDelayIfTcp(int fd);

}  // namespace dispatch::uvkj
