// PingProbe: an open-loop pinger on its own thread, to show how long a
// dispatcher's loop stalls while a bench drives some other load at it. A ping
// leaves at every tick whether or not earlier ones were answered, and each is
// timed from its tick, so a stall counts against every ping it delays (no
// coordinated omission).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>

namespace dispatch::bench {

struct PingFigures {
  size_t pings = 0;
  size_t unanswered = 0;  // the connection broke first
  double p50_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0;
};

class PingProbe {
 public:
  // Starts pinging `address` (e.g. "unix:/path/d.sock", "127.0.0.1:5000") at
  // `hz` from a thread of its own.
  PingProbe(std::string address, uint64_t hz);
  ~PingProbe();
  PingProbe(const PingProbe&) = delete;
  PingProbe& operator=(const PingProbe&) = delete;

  // Stops sending, waits for the replies still due (or the connection's end)
  // and summarises every ping sent. Call once.
  PingFigures Stop();

 private:
  struct Ping {
    uint64_t scheduled_ns = 0;
    uint64_t done_ns = 0;  // 0: no reply
  };
  void Run();

  const std::string address_;
  const uint64_t hz_;
  std::atomic<bool> stop_{false};
  std::deque<Ping> pings_;  // written by the probe thread only, read after join
  std::thread thread_;
};

// "  p50 0.123  p99 0.456  p99.9 1.234  max 5.678 ms (12345 pings)"
std::string FormatPingFigures(const PingFigures& f);

}  // namespace dispatch::bench
