// RefusedSchedules: the schedule calls a coordinator's first error refused,
// remembered so that a late copy of such a call gets the same answer.
//
// Why: a schedule call that meets a pending first error queues nothing and
// returns the error, which it clears. The client then forgets those request
// ids. A copy of the call can still reach the dispatcher later (sent on a
// connection the client already gave up on, delayed by retransmission, or a
// retry whose first attempt's reply was lost): without this record the error
// is gone by then, so the copy would queue closures the client was told were
// not queued; they would run and their outcomes would never be released
// (found by the simulation, tests/sim, seeds 9557 and 9623). With it, the
// copy gets the refusal again, which also tells a client whose first reply
// was lost what the error was.
//
// Kept in memory, bounded, not journaled: a dispatcher restart closes every
// connection, and with them every copy still in flight. The bound evicts the
// oldest refusals first (counted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dispatch::state {

class RefusedSchedules {
 public:
  struct Refusal {
    uint64_t closure_id = 0;  // the first error's closure
    std::string error;
  };

  static constexpr size_t kDefaultMaxRequests = 65536;
  static constexpr size_t kDefaultMaxErrorBytes = 8 << 20;

  explicit RefusedSchedules(size_t max_requests = kDefaultMaxRequests,
                            size_t max_error_bytes = kDefaultMaxErrorBytes);

  // Remembers that `refusal` answered the call of `request_ids` (zeros, which
  // name no request, are skipped).
  void Record(uint64_t coordinator_id, const std::vector<uint64_t>& request_ids,
              Refusal refusal);

  // The refusal that answered one of `request_ids` of this coordinator, or
  // nullptr when none of them was refused (or it was evicted).
  const Refusal* Find(uint64_t coordinator_id, const std::vector<uint64_t>& request_ids) const;
  bool Contains(uint64_t coordinator_id, uint64_t request_id) const {
    return by_request_.contains(Key{coordinator_id, request_id});
  }

  size_t requests() const { return by_request_.size(); }
  size_t error_bytes() const { return error_bytes_; }
  uint64_t evicted() const { return evicted_; }

 private:
  using Key = std::pair<uint64_t, uint64_t>;  // (coordinator, request id)
  struct Entry {
    std::vector<Key> keys;
    std::shared_ptr<const Refusal> refusal;
  };
  void EvictOldest();

  size_t max_requests_;
  size_t max_error_bytes_;
  std::map<Key, std::shared_ptr<const Refusal>> by_request_;
  std::deque<Entry> oldest_first_;
  size_t error_bytes_ = 0;
  uint64_t evicted_ = 0;
};

}  // namespace dispatch::state
