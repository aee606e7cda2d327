#include "reactor/peer_memory_budget.h"

#include <kj/debug.h>

namespace dispatch::reactor {

// The adapter behind WaitFor's promise: queued in the budget until granted.
class PeerMemoryBudget::Waiter {
 public:
  Waiter(kj::PromiseFulfiller<kj::Own<Reservation>>& fulfiller, PeerMemoryBudget& budget,
         uint64_t bytes)
      : fulfiller_(fulfiller), budget_(budget), bytes_(bytes) {
    position_ = budget_.waiters_.insert(budget_.waiters_.end(), this);
    if (bytes_ > kSmallBytes) ++budget_.large_waiting_;
  }
  ~Waiter() {
    if (queued_) Unlink();
  }
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  uint64_t bytes() const { return bytes_; }
  // Called by the budget with the bytes already taken; leaves the queue.
  void Grant() {
    Unlink();
    fulfiller_.fulfill(kj::heap<Reservation>(budget_, bytes_));
  }

 private:
  void Unlink() {
    budget_.waiters_.erase(position_);
    if (bytes_ > kSmallBytes) --budget_.large_waiting_;
    queued_ = false;
  }

  kj::PromiseFulfiller<kj::Own<Reservation>>& fulfiller_;
  PeerMemoryBudget& budget_;
  const uint64_t bytes_;
  std::list<Waiter*>::iterator position_;
  bool queued_ = true;
};

PeerMemoryBudget::PeerMemoryBudget(uint64_t limit_bytes)
    : limit_(limit_bytes), headroom_(limit_bytes / 8) {
  KJ_REQUIRE(limit_bytes > 0, "a peer memory budget needs a positive limit");
}

PeerMemoryBudget::~PeerMemoryBudget() {
  // Waiters are owned by promises that must be gone before the budget.
  KJ_ASSERT(waiters_.empty(), "peer memory budget destroyed with waiters queued");
}

uint64_t PeerMemoryBudget::CeilingFor(uint64_t bytes) const {
  return bytes <= kSmallBytes ? limit_ : limit_ - headroom_;
}

uint64_t PeerMemoryBudget::available() const {
  uint64_t ceiling = limit_ - headroom_;
  return used_ >= ceiling ? 0 : ceiling - used_;
}

void PeerMemoryBudget::Take(uint64_t bytes) {
  used_ += bytes;
  ++counters_.reservations;
  if (used_ > counters_.high_water_bytes) counters_.high_water_bytes = used_;
}

bool PeerMemoryBudget::TryReserve(uint64_t bytes) {
  if (!FitsNow(bytes)) {
    ++counters_.refusals;
    return false;
  }
  Take(bytes);
  return true;
}

kj::Maybe<kj::Own<PeerMemoryBudget::Reservation>> PeerMemoryBudget::TryReserveHandle(uint64_t bytes) {
  if (!TryReserve(bytes)) return nullptr;
  return kj::heap<Reservation>(*this, bytes);
}

void PeerMemoryBudget::ForceReserve(uint64_t bytes) {
  Take(bytes);
  if (used_ > limit_) ++counters_.overdrafts;
}

void PeerMemoryBudget::Release(uint64_t bytes) {
  KJ_ASSERT(bytes <= used_, "released more peer memory than was reserved", bytes, used_);
  used_ -= bytes;
  WakeWaiters();
}

void PeerMemoryBudget::WakeWaiters() {
  // Large waiters in FIFO order, so a large message is never starved by
  // smaller large ones behind it; small waiters whenever they fit.
  bool large_blocked = false;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    Waiter* waiter = *it++;  // Grant unlinks it
    bool small = waiter->bytes() <= kSmallBytes;
    if (!small && large_blocked) continue;
    if (Fits(waiter->bytes())) {
      Take(waiter->bytes());
      waiter->Grant();
    } else if (!small) {
      large_blocked = true;
    }
  }
}

kj::Maybe<kj::Promise<kj::Own<PeerMemoryBudget::Reservation>>> PeerMemoryBudget::WaitFor(uint64_t bytes) {
  if (bytes > CeilingFor(bytes)) {
    ++counters_.refusals;
    return nullptr;
  }
  if (FitsNow(bytes)) {
    Take(bytes);
    return kj::Promise<kj::Own<Reservation>>(kj::heap<Reservation>(*this, bytes));
  }
  ++counters_.waits;
  return kj::newAdaptedPromise<kj::Own<Reservation>, Waiter>(*this, bytes);
}

}  // namespace dispatch::reactor
