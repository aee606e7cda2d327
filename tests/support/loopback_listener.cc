#include "tests/support/loopback_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dispatch::testing {

int ListenOnLoopback(int backlog, int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const char* failed = nullptr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    failed = "bind";
  } else if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    failed = "getsockname";
  } else if (::listen(fd, backlog) != 0) {
    failed = "listen";
  }
  if (failed != nullptr) {
    const int error = errno;
    ::close(fd);
    throw std::runtime_error(std::string(failed) + " on 127.0.0.1: " + std::strerror(error));
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace dispatch::testing
