#include "bench/wakeup_probe.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "bench/latency.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Echoes each request after keeping its CPU busy for the microseconds it
// names (like a dispatcher in an fsync: the requester sleeps meanwhile).
void EchoUntilClosed(int fd) {
  uint32_t busy_us;
  while (read(fd, &busy_us, sizeof(busy_us)) == sizeof(busy_us)) {
    auto until = Clock::now() + std::chrono::microseconds(busy_us);
    while (Clock::now() < until) {
    }
    if (write(fd, &busy_us, sizeof(busy_us)) != sizeof(busy_us)) break;
  }
  _exit(0);
}

// A request there and back, less the time the child was told to be busy;
// nanoseconds.
uint64_t PingOnce(int fd, uint32_t busy_us) {
  auto begin = Clock::now();
  if (write(fd, &busy_us, sizeof(busy_us)) != sizeof(busy_us) ||
      read(fd, &busy_us, sizeof(busy_us)) != sizeof(busy_us)) {
    throw std::runtime_error("wakeup probe: the echo child went away");
  }
  uint64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - begin).count();
  return ns - std::min<uint64_t>(ns, uint64_t{busy_us} * 1000);
}

}  // namespace

WakeupProbe ProbeWakeups(uint64_t rounds, uint64_t idle_us) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw std::runtime_error("wakeup probe: socketpair failed");
  }
  pid_t child = fork();
  if (child < 0) throw std::runtime_error("wakeup probe: fork failed");
  if (child == 0) {
    close(fds[0]);
    EchoUntilClosed(fds[1]);
  }
  close(fds[1]);
  LatencySamples awake;
  LatencySamples asleep;
  try {
    for (int i = 0; i < 20; ++i) PingOnce(fds[0], 0);  // warm up
    // In runs, not alternating: a ping right after a slow wake-up finds the
    // child asleep for that long too.
    for (uint64_t i = 0; i < rounds; ++i) awake.Add(PingOnce(fds[0], 0));
    for (uint64_t i = 0; i < rounds; ++i) {
      asleep.Add(PingOnce(fds[0], static_cast<uint32_t>(idle_us)));
    }
  } catch (...) {
    close(fds[0]);
    waitpid(child, nullptr, 0);
    throw;
  }
  close(fds[0]);  // the child reads end of file and exits
  waitpid(child, nullptr, 0);
  return WakeupProbe{awake.PercentileMicros(50), asleep.PercentileMicros(50)};
}

}  // namespace dispatch::bench
