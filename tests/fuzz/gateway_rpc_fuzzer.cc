// Fuzz target: raw bytes from a peer, on a fresh connection to an in-process
// DispatcherServer (its own loop, work dir and Unix socket, made once per
// process), through everything a peer reaches: the accept path, the message
// guard (framing, --max-message-bytes, the peer memory budget), Cap'n Proto's
// RPC protocol, the gateway (any token is accepted, so the dispatcher's
// methods are reachable) and the services, journal and replies. The input is
// written, the write side shut, and the loop run until the server closes the
// connection or kInputDeadline passes (then the input counts as slow, not as
// a failure). Properties: no crash; the server never stops (a storage failure
// or a shutdown would end it); a closed connection is forgotten (the open
// connection count returns to zero).
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "common/log.h"
#include "reactor/dispatcher_server.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "tests/fuzz/fuzz_check.h"

namespace dispatch::fuzz {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kInputDeadline = std::chrono::seconds(2);
constexpr auto kForgetDeadline = std::chrono::seconds(2);

struct Harness {
  std::string dir;
  std::string socket_path;
  uvkj::UvLoop loop;
  std::unique_ptr<uvkj::UvAsyncIo> io;
  std::unique_ptr<reactor::DispatcherServer> server;
  uint64_t slow_inputs = 0;
};

std::string* g_dir = nullptr;
void RemoveDir() {
  std::error_code ignored;
  if (g_dir != nullptr) std::filesystem::remove_all(*g_dir, ignored);
}

// Never destroyed: the process ends with the fuzzer (atexit removes the dir).
Harness& TheHarness() {
  static Harness* h = [] {
    auto* harness = new Harness;
    std::string tmpl = (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                       std::string("/dispatch-fuzz-XXXXXX");
    FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp: %s", strerror(errno));
    harness->dir = tmpl;
    g_dir = &harness->dir;
    atexit(RemoveDir);
    harness->socket_path = harness->dir + "/gw.sock";
    // Quiet (KJ's own log too): a peer's bad bytes are not news. DISPATCH_FUZZ_LOG=1: everything.
    SetLogLevel(std::getenv("DISPATCH_FUZZ_LOG") ? LogLevel::kDebug : LogLevel::kError);
    harness->io = std::make_unique<uvkj::UvAsyncIo>(harness->loop.get());
    reactor::DispatcherOptions options;
    options.listen = "unix:" + harness->socket_path;
    options.work_dir = harness->dir + "/work";
    options.synchronous = storage::Synchronous::kNormal;  // no fsync per input
    options.tick_ms = 20;
    // Limits small enough for short inputs to cross them.
    options.limits.max_message_bytes = 64 << 10;
    options.limits.max_calls_in_flight_per_connection = 32;
    options.limits.max_nesting_depth = 16;
    harness->server = std::make_unique<reactor::DispatcherServer>(*harness->io, options);
    Result<std::string> bound = harness->server->Start();
    FUZZ_CHECK(bound.ok(), "dispatcher did not start: %s", bound.status().ToString().c_str());
    return harness;
  }();
  return *h;
}

// Runs the loop once without blocking, then waits up to 1 ms for the peer
// socket or the loop to have something.
void Pump(Harness& h, int fd) {
  h.io->Run(UV_RUN_NOWAIT);
  pollfd fds[2] = {{fd, POLLIN, 0}, {uv_backend_fd(h.loop.get()), POLLIN, 0}};
  poll(fds, fd >= 0 ? 2 : 1, 1);
  h.io->Run(UV_RUN_NOWAIT);
}

}  // namespace
}  // namespace dispatch::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dispatch::fuzz;
  Harness& h = TheHarness();

  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0, "socket: %s", strerror(errno));
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  FUZZ_CHECK(h.socket_path.size() < sizeof(addr.sun_path), "socket path too long");
  memcpy(addr.sun_path, h.socket_path.c_str(), h.socket_path.size() + 1);
  const auto start = Clock::now();
  while (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    FUZZ_CHECK(errno == EAGAIN || errno == EINTR, "connect: %s", strerror(errno));
    FUZZ_CHECK(Clock::now() - start < kInputDeadline, "the dispatcher accepts no connection");
    Pump(h, -1);
  }

  size_t sent = 0;
  bool write_shut = false;
  bool closed = false;
  char buf[1 << 16];
  while (!closed) {
    if (sent < size) {
      ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (errno != EAGAIN && errno != EINTR) {
        sent = size;  // the server closed the connection before reading it all
      }
    }
    if (sent == size && !write_shut) {
      shutdown(fd, SHUT_WR);
      write_shut = true;
    }
    Pump(h, fd);
    while (true) {
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) continue;
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) closed = true;
      break;
    }
    if (!closed && Clock::now() - start > kInputDeadline) {
      ++h.slow_inputs;
      break;
    }
  }
  close(fd);
  FUZZ_CHECK(!h.server->shutting_down(), "the dispatcher stopped (exit code %d)",
             h.server->exit_code());
  const auto closed_at = Clock::now();
  while (h.server->rpc().connection_count() != 0) {
    FUZZ_CHECK(Clock::now() - closed_at < kForgetDeadline,
               "%zu connections still open after the peer closed",
               h.server->rpc().connection_count());
    Pump(h, -1);
  }
  return 0;
}
