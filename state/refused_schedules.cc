#include "state/refused_schedules.h"

namespace dispatch::state {

RefusedSchedules::RefusedSchedules(size_t max_requests, size_t max_error_bytes)
    : max_requests_(max_requests), max_error_bytes_(max_error_bytes) {}

void RefusedSchedules::Record(uint64_t coordinator_id, const std::vector<uint64_t>& request_ids,
                              Refusal refusal) {
  Entry entry;
  entry.refusal = std::make_shared<const Refusal>(std::move(refusal));
  for (uint64_t request_id : request_ids) {
    if (request_id == 0) continue;
    Key key{coordinator_id, request_id};
    if (by_request_.emplace(key, entry.refusal).second) entry.keys.push_back(key);
  }
  if (entry.keys.empty()) return;
  error_bytes_ += entry.refusal->error.size();
  oldest_first_.push_back(std::move(entry));
  // The newest refusal always stays, even alone over a bound.
  while (oldest_first_.size() > 1 &&
         (by_request_.size() > max_requests_ || error_bytes_ > max_error_bytes_)) {
    EvictOldest();
  }
}

void RefusedSchedules::EvictOldest() {
  Entry& oldest = oldest_first_.front();
  for (const Key& key : oldest.keys) by_request_.erase(key);
  error_bytes_ -= oldest.refusal->error.size();
  evicted_ += oldest.keys.size();
  oldest_first_.pop_front();
}

const RefusedSchedules::Refusal* RefusedSchedules::Find(
    uint64_t coordinator_id, const std::vector<uint64_t>& request_ids) const {
  for (uint64_t request_id : request_ids) {
    if (request_id == 0) continue;
    auto it = by_request_.find(Key{coordinator_id, request_id});
    if (it != by_request_.end()) return it->second.get();
  }
  return nullptr;
}

}  // namespace dispatch::state
