// UvLowLevelIoProvider: KJ's LowLevelAsyncIoProvider on libuv. Wrapping it
// with kj::newAsyncIoProvider() gives a full kj::Network (parseAddress,
// listen, connect; "HOST:PORT" and "unix:PATH") whose every descriptor is
// watched by the one libuv loop of the thread.
#pragma once

#include <uv.h>

#include <kj/async-io.h>

#include "reactor/uvkj/timer.h"

namespace dispatch::uvkj {

class UvLowLevelIoProvider final : public kj::LowLevelAsyncIoProvider {
 public:
  UvLowLevelIoProvider(uv_loop_t* loop, UvTimer& timer) : loop_(loop), timer_(timer) {}

  kj::Own<kj::AsyncInputStream> wrapInputFd(int fd, uint flags = 0) override;
  kj::Own<kj::AsyncOutputStream> wrapOutputFd(int fd, uint flags = 0) override;
  kj::Own<kj::AsyncIoStream> wrapSocketFd(int fd, uint flags = 0) override;
  kj::Promise<kj::Own<kj::AsyncIoStream>> wrapConnectingSocketFd(int fd, const struct sockaddr* addr,
                                                                 uint addrlen,
                                                                 uint flags = 0) override;
  kj::Own<kj::ConnectionReceiver> wrapListenSocketFd(int fd, NetworkFilter& filter,
                                                     uint flags = 0) override;
  kj::Timer& getTimer() override { return timer_; }

 private:
  kj::Own<kj::AsyncIoStream> Wrap(int fd, uint flags);

  uv_loop_t* const loop_;
  UvTimer& timer_;
};

}  // namespace dispatch::uvkj
