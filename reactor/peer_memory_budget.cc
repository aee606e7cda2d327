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
  }
  ~Waiter() {
    if (queued_) budget_.waiters_.erase(position_);
  }
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  uint64_t bytes() const { return bytes_; }
  // Called by the budget with the bytes already taken; leaves the queue.
  void Grant() {
    budget_.waiters_.erase(position_);
    queued_ = false;
    fulfiller_.fulfill(kj::heap<Reservation>(budget_, bytes_));
  }

 private:
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
  if (!waiters_.empty() || !Fits(bytes)) {
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
  // FIFO: the front waiter is served first, so a large message is never
  // starved by a stream of smaller ones behind it.
  while (!waiters_.empty() && Fits(waiters_.front()->bytes())) {
    Waiter* front = waiters_.front();
    Take(front->bytes());
    front->Grant();
  }
}

kj::Maybe<kj::Promise<kj::Own<PeerMemoryBudget::Reservation>>> PeerMemoryBudget::WaitFor(uint64_t bytes) {
  if (bytes > CeilingFor(bytes)) {
    ++counters_.refusals;
    return nullptr;
  }
  if (waiters_.empty() && Fits(bytes)) {
    Take(bytes);
    return kj::Promise<kj::Own<Reservation>>(kj::heap<Reservation>(*this, bytes));
  }
  ++counters_.waits;
  return kj::newAdaptedPromise<kj::Own<Reservation>, Waiter>(*this, bytes);
}

}  // namespace dispatch::reactor
