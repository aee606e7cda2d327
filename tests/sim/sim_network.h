// SimNetwork: the simulation's clock and wires. Messages travel on
// connections (one per actor and dispatcher run, as Cap'n Proto connections
// do): each is delivered at its own time (so messages overtake each other),
// and one on a connection that has closed meanwhile is dropped (its
// `on_drop`, if any, runs instead, as a failed push's promise would reject),
// except a reply the dispatcher wrote before its process died: the kernel
// still sends what was written, so it reaches its caller (that is how a
// reply released before its commit becomes visible after a crash).
// Delivery order is (time, send order): deterministic, no wall clock, no
// threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>

namespace dispatch::sim {

class SimNetwork {
 public:
  int64_t now_ms() const { return now_ms_; }
  // Moves the clock forward (never back).
  void AdvanceTo(int64_t ms) {
    if (ms > now_ms_) now_ms_ = ms;
  }

  uint64_t Open() {
    open_.insert(next_connection_);
    return next_connection_++;
  }
  void Close(uint64_t connection) { open_.erase(connection); }
  bool IsOpen(uint64_t connection) const { return open_.contains(connection); }
  // A process died: every connection ends (the dispatcher's are all of them).
  void CloseAll() {
    died_.insert(open_.begin(), open_.end());
    open_.clear();
  }

  // Runs `deliver` at now + delay_ms if `connection` is still open then;
  // else `on_drop` (when given). `written`: a reply the dispatcher wrote,
  // delivered even if its process dies meanwhile.
  void Send(uint64_t connection, int64_t delay_ms, std::function<void()> deliver,
            std::function<void()> on_drop = nullptr, bool written = false) {
    queue_.emplace(std::make_pair(now_ms_ + delay_ms, next_order_++),
                   Message{connection, std::move(deliver), std::move(on_drop), written});
  }

  // Delivers every message due by now, in order; returns how many ran.
  int DeliverDue() {
    int n = 0;
    while (!queue_.empty() && queue_.begin()->first.first <= now_ms_) {
      Message message = std::move(queue_.begin()->second);
      queue_.erase(queue_.begin());
      if (IsOpen(message.connection) || (message.written && died_.contains(message.connection))) {
        message.deliver();
        ++n;
      } else if (message.on_drop) {
        message.on_drop();
      }
    }
    return n;
  }
  bool Idle() const { return queue_.empty(); }
  size_t InFlight() const { return queue_.size(); }

 private:
  struct Message {
    uint64_t connection = 0;
    std::function<void()> deliver;
    std::function<void()> on_drop;
    bool written = false;
  };
  int64_t now_ms_ = 0;
  uint64_t next_connection_ = 1;
  uint64_t next_order_ = 0;
  std::set<uint64_t> open_;
  std::set<uint64_t> died_;  // closed by their process's death
  std::map<std::pair<int64_t, uint64_t>, Message> queue_;
};

}  // namespace dispatch::sim
