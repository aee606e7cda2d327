// DurableWaiters: the replies parked on one group of updates until that group
// is durable, and the snapshot files that may be removed only then. A group
// is fulfilled once (its updates are durable) or rejected once (fail-stop);
// a moved-from group is empty and may be reused. REQUIRES: loop thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <kj/async.h>
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
    files_ = std::exchange(other.files_, {});
    absorbed_ = kj::mv(other.absorbed_);
    other.absorbed_.clear();
    other.Reset();
    return *this;
  }
  DurableWaiters(const DurableWaiters&) = delete;
  DurableWaiters& operator=(const DurableWaiters&) = delete;
  // True when someone waits or a file waits to be removed.
  bool empty() const { return promise_ == nullptr && files_.empty() && absorbed_.empty(); }

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
  // A file to remove once the group is durable (one it made obsolete).
  void RemoveWhenDurable(std::string name) { files_.push_back(std::move(name)); }

  // Makes `other`'s waiters and files part of this group (they are durable
  // when it is) and leaves `other` empty: a written commit's group takes in
  // the replies that waited for that commit to be written.
  void Absorb(DurableWaiters&& other) {
    KJ_IF_MAYBE (fulfiller, other.fulfiller_) { absorbed_.add(kj::mv(*fulfiller)); }
    for (auto& f : other.absorbed_) absorbed_.add(kj::mv(f));
    for (std::string& name : other.files_) files_.push_back(std::move(name));
    other.files_.clear();
    other.absorbed_.clear();
    other.Reset();
  }

  // The group is durable: releases the waiters, returns the files to remove.
  std::vector<std::string> Fulfill() {
    KJ_IF_MAYBE (fulfiller, fulfiller_) { (*fulfiller)->fulfill(); }
    for (auto& f : absorbed_) f->fulfill();
    absorbed_.clear();
    Reset();
    return std::exchange(files_, {});
  }
  // The group can never be durable: every waiter gets `status`. Its files
  // stay (a restart removes what the database does not name).
  void Reject(const Status& status) {
    KJ_IF_MAYBE (fulfiller, fulfiller_) { (*fulfiller)->reject(ExceptionFromStatus(status)); }
    for (auto& f : absorbed_) f->reject(ExceptionFromStatus(status));
    absorbed_.clear();
    Reset();
    files_.clear();
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
  std::vector<std::string> files_;
};

}  // namespace dispatch::reactor
