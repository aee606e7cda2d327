#include "tests/support/raw_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace dispatch::testing {

RawSocket::RawSocket(const std::string& address) {
  if (address.rfind("tcp:", 0) == 0) {
    std::string rest = address.substr(4);
    size_t colon = rest.rfind(':');
    struct sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(rest.substr(colon + 1))));
    if (inet_pton(AF_INET, rest.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
      throw std::runtime_error("not an IPv4 address: " + address);
    }
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw std::runtime_error("connect failed: " + address + ": " + strerror(errno));
    }
  } else if (address.rfind("unix:", 0) == 0) {
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, address.substr(5).c_str(), sizeof(addr.sun_path) - 1);
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw std::runtime_error("connect failed: " + address + ": " + strerror(errno));
    }
  } else {
    throw std::runtime_error("unsupported address " + address);
  }
}

RawSocket::~RawSocket() {
  if (fd_ >= 0) close(fd_);
}

bool RawSocket::WriteAll(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = send(fd_, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= n;
  }
  return true;
}

size_t RawSocket::WriteWithin(const void* data, size_t size, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  const char* p = static_cast<const char*>(data);
  size_t written = 0;
  while (written < size) {
    ssize_t n = send(fd_, p + written, size - written, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      written += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;  // peer gone
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    struct pollfd pfd = {fd_, POLLOUT, 0};
    poll(&pfd, 1, static_cast<int>(left.count()));
  }
  return written;
}

std::optional<std::string> RawSocket::ReadUntilClosed(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string received;
  char buffer[65536];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    struct pollfd pfd = {fd_, POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::nullopt;
    ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n > 0) {
      received.append(buffer, n);
      continue;
    }
    if (n == 0) return received;
    if (errno != EINTR && errno != EAGAIN) return received;  // reset
  }
}

bool RawSocket::PeerClosesWithin(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[65536];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    struct pollfd pfd = {fd_, POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n == 0) return true;
    if (n < 0 && errno != EINTR && errno != EAGAIN) return true;  // reset
  }
}

void RawSocket::Reset() {
  struct linger lg = {1, 0};
  setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(fd_);
  fd_ = -1;
}

}  // namespace dispatch::testing
