// PingProbe: an open-loop pinger on its own thread, to show how long a
// dispatcher's loop stalls while a bench drives some other load at it. A ping
// leaves at every tick whether or not earlier ones were answered, and each is
// timed from its tick, so a stall counts against every ping it delays (no
// coordinated omission).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace dispatch::bench {

// One ping, in CLOCK_MONOTONIC nanoseconds (steady_clock, uv_hrtime).
struct PingSample {
  uint64_t scheduled_ns = 0;  // its tick
  uint64_t done_ns = 0;       // its reply; 0: none (the connection broke first)
};

struct PingFigures {
  size_t pings = 0;
  size_t unanswered = 0;
  double p50_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0;  // of the answered ones
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
  // and returns every ping sent, in order. Call once.
  std::vector<PingSample> Stop();

 private:
  void Run();

  const std::string address_;
  const uint64_t hz_;
  std::atomic<bool> stop_{false};
  std::deque<PingSample> pings_;  // written by the probe thread only, read after join
  std::thread thread_;
};

// The figures of the pings `keep` accepts (every ping when it is empty).
PingFigures SummarizePings(const std::vector<PingSample>& pings,
                           const std::function<bool(const PingSample&)>& keep = {});

// "p50 0.123  p99 0.456  p99.9 1.234  max 5.678 ms (12345 pings)"
std::string FormatPingFigures(const PingFigures& f);

}  // namespace dispatch::bench
