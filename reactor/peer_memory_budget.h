// PeerMemoryBudget: one process-wide count of the bytes the dispatcher holds
// on behalf of peers (half-received messages, queued replies, and whatever
// else is charged to it), against one limit, whatever the number of
// connections. Callers either take bytes now (TryReserve), take bytes they
// already hold (ForceReserve: counted, may overdraw, never refused), or wait
// for room (WaitFor). Large reservations (over kSmallBytes) leave the last
// eighth of the limit free and are served in FIFO order; small ones may use
// the whole limit and pass queued large ones, so a flood of large messages
// never stalls small calls.
// REQUIRES: loop thread only; no mutex (see DESIGN.md, principle 1).
#pragma once

#include <cstdint>
#include <list>

#include <kj/async.h>

namespace dispatch::reactor {

struct PeerMemoryCounters {
  uint64_t reservations = 0;      // TryReserve/WaitFor grants and ForceReserve calls
  uint64_t refusals = 0;          // TryReserve that did not fit; WaitFor that can never fit
  uint64_t waits = 0;             // WaitFor calls that had to queue
  uint64_t overdrafts = 0;        // ForceReserve calls that took use past the limit
  uint64_t high_water_bytes = 0;  // most bytes ever in use at once
};

class PeerMemoryBudget {
 public:
  // Reservations of up to this many bytes count as small (see headroom).
  static constexpr uint64_t kSmallBytes = 64 * 1024;

  // `limit_bytes` > 0. Large reservations may bring use up to
  // limit_bytes - limit_bytes / 8; small ones up to limit_bytes.
  explicit PeerMemoryBudget(uint64_t limit_bytes);
  ~PeerMemoryBudget();
  PeerMemoryBudget(const PeerMemoryBudget&) = delete;
  PeerMemoryBudget& operator=(const PeerMemoryBudget&) = delete;

  // Held bytes handed back when destroyed (release on every path).
  class Reservation {
   public:
    Reservation(PeerMemoryBudget& budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    ~Reservation() { budget_.Release(bytes_); }
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    uint64_t bytes() const { return bytes_; }

   private:
    PeerMemoryBudget& budget_;
    const uint64_t bytes_;
  };

  // Takes `bytes` if they fit now (for a large reservation: and no large one
  // is queued ahead); else counts a refusal and returns false, changing nothing.
  bool TryReserve(uint64_t bytes);
  // Takes `bytes` whatever the limit: for memory already held (a reply the
  // RPC system queued). Counted as an overdraft when it crosses the limit.
  void ForceReserve(uint64_t bytes);
  // REQUIRES: `bytes` were reserved and not yet released. Wakes waiters.
  void Release(uint64_t bytes);

  // Resolves with a Reservation once `bytes` fit (large ones in FIFO order
  // among themselves; small ones as soon as they fit). Dropping
  // the promise leaves the queue (and releases a grant not yet taken).
  // Returns null when `bytes` can never fit (more than the ceiling for its
  // size): counted as a refusal.
  kj::Maybe<kj::Promise<kj::Own<Reservation>>> WaitFor(uint64_t bytes);
  // Same as TryReserve, as an RAII handle; null when it does not fit.
  kj::Maybe<kj::Own<Reservation>> TryReserveHandle(uint64_t bytes);

  // True when TryReserve(bytes) would succeed now (nothing is counted).
  bool FitsNow(uint64_t bytes) const {
    return Fits(bytes) && (bytes <= kSmallBytes || large_waiting_ == 0);
  }
  // The most a reservation of `bytes` may bring use up to.
  uint64_t CeilingFor(uint64_t bytes) const;
  // Bytes a large reservation could take now.
  uint64_t available() const;
  uint64_t used() const { return used_; }
  uint64_t limit() const { return limit_; }
  size_t waiting() const { return waiters_.size(); }
  const PeerMemoryCounters& counters() const { return counters_; }

 private:
  class Waiter;
  bool Fits(uint64_t bytes) const { return used_ + bytes <= CeilingFor(bytes); }
  void Take(uint64_t bytes);
  void WakeWaiters();

  const uint64_t limit_;
  const uint64_t headroom_;
  uint64_t used_ = 0;
  std::list<Waiter*> waiters_;  // FIFO; each Waiter unlinks itself when dropped
  size_t large_waiting_ = 0;    // waiters over kSmallBytes
  PeerMemoryCounters counters_;
};

}  // namespace dispatch::reactor
