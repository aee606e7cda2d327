#include "reactor/uvkj/io_provider.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>

#include <kj/debug.h>

#include "reactor/uvkj/listener.h"
#include "reactor/uvkj/socket_stream.h"

namespace dispatch::uvkj {
namespace {

// Applies the LowLevelAsyncIoProvider flags: non-blocking unless known to be,
// close-on-exec for descriptors we own unless known to be.
void PrepareFd(int fd, uint flags) {
  if (!(flags & kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK)) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) ThrowSocketError(errno, "fcntl");
  }
  if ((flags & kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP) &&
      !(flags & kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC)) {
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) ThrowSocketError(errno, "fcntl");
  }
}

}  // namespace

kj::Own<kj::AsyncIoStream> UvLowLevelIoProvider::Wrap(int fd, uint flags) {
  PrepareFd(fd, flags);
  return kj::heap<UvSocketStream>(loop_, fd, (flags & TAKE_OWNERSHIP) != 0);
}

kj::Own<kj::AsyncInputStream> UvLowLevelIoProvider::wrapInputFd(int fd, uint flags) {
  return Wrap(fd, flags);
}

kj::Own<kj::AsyncOutputStream> UvLowLevelIoProvider::wrapOutputFd(int fd, uint flags) {
  return Wrap(fd, flags);
}

kj::Own<kj::AsyncIoStream> UvLowLevelIoProvider::wrapSocketFd(int fd, uint flags) {
  return Wrap(fd, flags);
}

kj::Promise<kj::Own<kj::AsyncIoStream>> UvLowLevelIoProvider::wrapConnectingSocketFd(
    int fd, const struct sockaddr* addr, uint addrlen, uint flags) {
  // Wrap first so the descriptor is owned (and closed) even if connect fails.
  auto stream = kj::heap<UvSocketStream>(loop_, fd, (flags & TAKE_OWNERSHIP) != 0);
  PrepareFd(fd, flags);
  for (;;) {
    if (::connect(fd, addr, addrlen) == 0) break;
    int error = errno;
    if (error == EINTR) continue;
    if (error != EINPROGRESS) ThrowSocketError(error, "connect");
    auto& ref = *stream;
    return ref.WhenWritable().then([fd, stream = kj::mv(stream)]() mutable {
      int error = 0;
      socklen_t len = sizeof(error);
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0) error = errno;
      if (error != 0) ThrowSocketError(error, "connect");
      SetNoDelayIfTcp(fd);
      return kj::Own<kj::AsyncIoStream>(kj::mv(stream));
    });
  }
  SetNoDelayIfTcp(fd);
  return kj::Own<kj::AsyncIoStream>(kj::mv(stream));
}

kj::Own<kj::ConnectionReceiver> UvLowLevelIoProvider::wrapListenSocketFd(int fd,
                                                                         NetworkFilter& filter,
                                                                         uint flags) {
  PrepareFd(fd, flags);
  KJ_REQUIRE(flags & TAKE_OWNERSHIP, "listening sockets are always owned by their receiver");
  return kj::heap<UvConnectionReceiver>(loop_, timer_, fd, filter);
}

}  // namespace dispatch::uvkj
