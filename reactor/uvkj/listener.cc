#include "reactor/uvkj/listener.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <kj/debug.h>

#include "reactor/uvkj/socket_stream.h"

namespace dispatch::uvkj {
namespace {

// Errors after which the next accept() may well succeed at once: the
// connection died in the backlog, or a signal interrupted us.
bool IsTransientAcceptError(int error) {
  switch (error) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case EPERM:
      return true;
    default:
      return false;
  }
}

// Resource exhaustion: retrying immediately would spin.
bool IsExhaustionError(int error) {
  return error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM;
}

constexpr auto kExhaustionBackoff = 100 * kj::MILLISECONDS;

}  // namespace

void SetNoDelayIfTcp(int fd) {
  struct sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) < 0) return;
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

UvConnectionReceiver::UvConnectionReceiver(uv_loop_t* loop, kj::Timer& timer, int fd,
                                           kj::LowLevelAsyncIoProvider::NetworkFilter& filter)
    : loop_(loop), timer_(timer), filter_(filter), fd_(fd), watcher_(loop, fd) {}

UvConnectionReceiver::~UvConnectionReceiver() noexcept(false) {}

kj::Promise<kj::Own<kj::AsyncIoStream>> UvConnectionReceiver::accept() {
  return kj::evalNow([this]() { return AcceptLoop(); });
}

kj::Promise<kj::Own<kj::AsyncIoStream>> UvConnectionReceiver::AcceptLoop() {
  for (;;) {
    struct sockaddr_storage addr;
    socklen_t len = sizeof(addr);
    int fd = ::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int error = errno;
      if (error == EAGAIN || error == EWOULDBLOCK) {
        return watcher_.WhenReadable().then([this]() { return AcceptLoop(); });
      }
      if (IsTransientAcceptError(error)) continue;
      if (IsExhaustionError(error)) {
        KJ_LOG(WARNING, "accept() out of resources; backing off", strerror(error));
        return timer_.afterDelay(kExhaustionBackoff).then([this]() { return AcceptLoop(); });
      }
      ThrowSocketError(error, "accept");
    }
    kj::AutoCloseFd owned(fd);
    if (!filter_.shouldAllow(reinterpret_cast<sockaddr*>(&addr), len)) continue;
    SetNoDelayIfTcp(fd);
    return kj::Own<kj::AsyncIoStream>(kj::heap<UvSocketStream>(loop_, owned.release(), true));
  }
}

uint UvConnectionReceiver::getPort() {
  struct sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
    ThrowSocketError(errno, "getsockname");
  }
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

void UvConnectionReceiver::getsockopt(int level, int option, void* value, uint* length) {
  socklen_t len = *length;
  if (::getsockopt(fd_.get(), level, option, value, &len) < 0) ThrowSocketError(errno, "getsockopt");
  *length = len;
}

void UvConnectionReceiver::setsockopt(int level, int option, const void* value, uint length) {
  if (::setsockopt(fd_.get(), level, option, value, length) < 0) {
    ThrowSocketError(errno, "setsockopt");
  }
}

void UvConnectionReceiver::getsockname(struct sockaddr* addr, uint* length) {
  socklen_t len = *length;
  if (::getsockname(fd_.get(), addr, &len) < 0) ThrowSocketError(errno, "getsockname");
  *length = len;
}

}  // namespace dispatch::uvkj
