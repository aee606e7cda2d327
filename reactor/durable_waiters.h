// DurableWaiters: the replies parked on one group of updates until that group
// is durable, and what may be done only then (removing the snapshot files a
// newer snapshot's record made obsolete). A group is fulfilled once (its
// updates are durable) or rejected once (fail-stop); a moved-from group is
// empty and may be reused. REQUIRES: loop thread.
#pragma once

#include <utility>
#include <vector>

#include <kj/async.h>
#include <kj/function.h>
#include <kj/vector.h>

#include "common/rpc_status.h"
#include "common/status.h"

namespace dispatch::reactor {

class DurableWaiters {
 public:
  DurableWaiters() = default;
  // Moving leaves `other` empty (kj::Maybe's own move would leave a
  // moved-from promise behind).
  DurableWaiters(DurableWaiters&& other) { *this = kj::mv(other); }
  DurableWaiters& operator=(DurableWaiters&& other) {
    fulfiller_ = kj::mv(other.fulfiller_);
    promise_ = kj::mv(other.promise_);
    actions_ = std::exchange(other.actions_, {});
    absorbed_ = kj::mv(other.absorbed_);
    other.absorbed_.clear();
    other.Reset();
    return *this;
  }
  DurableWaiters(const DurableWaiters&) = delete;
  DurableWaiters& operator=(const DurableWaiters&) = delete;
  // True when nobody waits and nothing waits to be done.
  bool empty() const { return promise_ == nullptr && actions_.empty() && absorbed_.empty(); }

  // A promise that resolves when the group is durable.
  kj::Promise<void> Wait() {
    if (promise_ == nullptr) {
      auto paf = kj::newPromiseAndFulfiller<void>();
      fulfiller_ = kj::mv(paf.fulfiller);
      promise_ = paf.promise.fork();
    }
    KJ_IF_MAYBE (forked, promise_) { return forked->addBranch(); }
    KJ_UNREACHABLE;
  }
  // Runs `action` once the group is durable (never, if it is rejected).
  void WhenDurable(kj::Function<void()> action) { actions_.push_back(kj::mv(action)); }

  // Makes `other`'s waiters and actions part of this group (they are
  // durable when it is) and leaves `other` empty.
  void Absorb(DurableWaiters&& other) {
    KJ_IF_MAYBE (fulfiller, other.fulfiller_) { absorbed_.add(kj::mv(*fulfiller)); }
    for (auto& f : other.absorbed_) absorbed_.add(kj::mv(f));
    for (auto& action : other.actions_) actions_.push_back(kj::mv(action));
    other.actions_.clear();
    other.absorbed_.clear();
    other.Reset();
  }

  // The group is durable: releases the waiters (their continuations run
  // later, on the KJ loop) and runs the actions now, in order.
  void Fulfill() {
    KJ_IF_MAYBE (fulfiller, fulfiller_) { (*fulfiller)->fulfill(); }
    for (auto& f : absorbed_) f->fulfill();
    absorbed_.clear();
    Reset();
    for (auto& action : std::exchange(actions_, {})) action();
  }
  // The group can never be durable: every waiter gets `status`, and the
  // actions are dropped (files left behind are removed by a restart, which
  // removes what the database does not name).
  void Reject(const Status& status) {
    KJ_IF_MAYBE (fulfiller, fulfiller_) { (*fulfiller)->reject(ExceptionFromStatus(status)); }
    for (auto& f : absorbed_) f->reject(ExceptionFromStatus(status));
    absorbed_.clear();
    Reset();
    actions_.clear();
  }

 private:
  void Reset() {
    fulfiller_ = nullptr;
    promise_ = nullptr;
  }

  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> fulfiller_;
  // Fulfillers of groups taken in by Absorb.
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> absorbed_;
  kj::Maybe<kj::ForkedPromise<void>> promise_;
  std::vector<kj::Function<void()>> actions_;
};

}  // namespace dispatch::reactor
