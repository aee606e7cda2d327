// StallingRelay: relays TCP connections from a free loopback port to a
// server, both ways, on a thread of its own, and can stall some of them: the
// server's bytes for a stalled connection are left unread (the connection
// stays open), as a stream that neither delivers nor ends. A test puts it
// between a real client and a real server (e.g. a standby and etcd) to stall
// one kind of request without touching the others.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dispatch::testing {

class StallingRelay {
 public:
  // `target`: "tcp:HOST:PORT". Throws std::runtime_error when it cannot listen.
  explicit StallingRelay(std::string target);
  ~StallingRelay();
  StallingRelay(const StallingRelay&) = delete;
  StallingRelay& operator=(const StallingRelay&) = delete;

  int port() const { return port_; }
  // Stalls every open connection whose client has sent `needle` so far (e.g.
  // "POST /v3/watch"); connections opened or matched later flow. Returns how
  // many it stalled, once the relay thread has applied it.
  size_t Stall(const std::string& needle);
  // Arms a stall of the first connection whose client sends `needle` from
  // now on: it is stalled right after that request is relayed, so its reply
  // is held for certain. One connection only; later ones flow.
  void StallFirstToSend(const std::string& needle);
  // Connections stalled so far (by either call).
  size_t stalled();
  // Bytes the server sent on the open stalled connections that wait there,
  // unrelayed (a reply the client has not got), once the relay thread looked.
  size_t HeldServerBytes();
  // Closes the stalled connections on both sides, as a server that died
  // with the request unanswered; returns how many, once applied.
  size_t CutStalled();
  // Why the relay thread stopped early (empty: it did not).
  std::string failure();

 private:
  struct Connection;
  void Run();
  void Relay();
  // Applies a pending Stall() (relay thread).
  void ApplyStall(std::vector<std::unique_ptr<Connection>>& connections);
  // Applies a pending CutStalled() (relay thread).
  void ApplyCut(std::vector<std::unique_ptr<Connection>>& connections);
  // Answers a pending HeldServerBytes() (relay thread).
  void ApplyCount(std::vector<std::unique_ptr<Connection>>& connections);
  // Stalls `c` if it matches the armed needle (relay thread).
  void MatchArmed(Connection& c);

  const std::string target_;
  int port_ = 0;
  int listener_ = -1;
  int wake_[2] = {-1, -1};  // a byte: a Stall() is pending, or (stopping_) stop
  std::mutex mu_;
  bool stopping_ = false;
  std::string stall_needle_;       // the pending Stall()'s needle
  bool stall_pending_ = false;
  size_t stalled_ = 0;             // the answer to the last Stall()
  std::string armed_needle_;       // StallFirstToSend()'s, until it matched
  size_t stalled_total_ = 0;       // stalled()
  bool cut_pending_ = false;
  size_t cut_ = 0;                 // the answer to the last CutStalled()
  bool count_pending_ = false;
  size_t held_bytes_ = 0;  // the answer to the last HeldServerBytes()
  std::condition_variable stall_done_;
  std::string failure_;
  std::thread thread_;
};

}  // namespace dispatch::testing
