// DurableWaiters: the replies parked on one group of updates until that group
// is durable, and the snapshot files that may be removed only then. A group
// is fulfilled once (its updates are durable) or rejected once (fail-stop);
// a moved-from group is empty and may be reused. REQUIRES: loop thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <kj/async.h>

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
    other.Reset();
    return *this;
  }
  DurableWaiters(const DurableWaiters&) = delete;
  DurableWaiters& operator=(const DurableWaiters&) = delete;
  // True when someone waits or a file waits to be removed.
  bool empty() const { return promise_ == nullptr && files_.empty(); }

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

  // The group is durable: releases the waiters, returns the files to remove.
  std::vector<std::string> Fulfill() {
    KJ_IF_MAYBE (fulfiller, fulfiller_) { (*fulfiller)->fulfill(); }
    Reset();
    return std::exchange(files_, {});
  }
  // The group can never be durable: every waiter gets `status`. Its files
  // stay (a restart removes what the database does not name).
  void Reject(const Status& status) {
    KJ_IF_MAYBE (fulfiller, fulfiller_) { (*fulfiller)->reject(ExceptionFromStatus(status)); }
    Reset();
    files_.clear();
  }

 private:
  void Reset() {
    fulfiller_ = nullptr;
    promise_ = nullptr;
  }

  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> fulfiller_;
  kj::Maybe<kj::ForkedPromise<void>> promise_;
  std::vector<std::string> files_;
};

}  // namespace dispatch::reactor
