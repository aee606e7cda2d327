// RawSocket: a plain blocking-free client socket for tests that must speak
// garbage, stall, or vanish mid-message, which no well-behaved RPC client
// does. Every read waits with a deadline (poll), never a sleep.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace dispatch::testing {

class RawSocket {
 public:
  // "tcp:HOST:PORT" or "unix:PATH"; throws std::runtime_error on failure.
  explicit RawSocket(const std::string& address);
  ~RawSocket();
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  int fd() const { return fd_; }
  // Writes everything or returns false (peer gone).
  bool WriteAll(const void* data, size_t size);
  // Writes what the peer accepts within `timeout` (never blocks past it);
  // returns the bytes written. Stops early when the peer is gone.
  size_t WriteWithin(const void* data, size_t size, std::chrono::milliseconds timeout);
  // Everything the peer sends until it closes (EOF or reset); nullopt when
  // it has not closed within `timeout`.
  std::optional<std::string> ReadUntilClosed(std::chrono::milliseconds timeout);
  // True when the peer closed the connection (EOF or reset) within `timeout`;
  // data that arrives first is read and discarded.
  bool PeerClosesWithin(std::chrono::milliseconds timeout);
  // Closes with an RST instead of a FIN.
  void Reset();

 private:
  int fd_ = -1;
};

}  // namespace dispatch::testing
