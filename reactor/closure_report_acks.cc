// ClosureDispatcher: when to answer a worker's report call. A report that
// leaves its worker with no closure running is answered with the next push
// to that worker (both in one write, so the worker wakes once) or by the
// hold timer; one from a worker with closures still running is answered
// once durable, as every other call is.

#include "reactor/closure_dispatcher.h"

namespace dispatch::reactor {

kj::Promise<void> ClosureDispatcher::AckReport(uint64_t worker_id) {
  auto entry = live_.find(worker_id);
  if (!holding_acks_ || options_.report_ack_hold_ms == 0 || entry == live_.end() ||
      state().NumClosuresOnWorker(worker_id) > 0) {
    return kj::READY_NOW;
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  const uint64_t now = uv_now(loop_);
  entry->second.held_acks.emplace_back(now, kj::mv(paf.fulfiller));
  held_order_.emplace_back(now, worker_id);
  if (ack_timer_ == nullptr) {
    ack_timer_ = std::make_unique<uvkj::UvRepeatingTimer>(loop_, options_.report_ack_hold_ms,
                                                          [this]() { SweepAcks(); });
    ack_timer_->Unref();
    ack_timer_->Start();
  } else if (!ack_running_) {
    ack_timer_->Start();
  }
  ack_running_ = true;
  return kj::mv(paf.promise);
}

void ClosureDispatcher::StopHoldingAcks() {
  holding_acks_ = false;
  for (auto& [id, entry] : live_) ReleaseAcks(entry);
  held_order_.clear();
}

void ClosureDispatcher::ReleaseAcks(LiveEntry& entry, uint64_t min_age_ms) {
  const uint64_t now = uv_now(loop_);
  auto& held = entry.held_acks;
  auto kept = held.begin();
  for (auto& ack : held) {
    if (now - ack.first >= min_age_ms) {
      ack.second->fulfill();
    } else {
      if (&*kept != &ack) *kept = kj::mv(ack);
      ++kept;
    }
  }
  held.erase(kept, held.end());
}

void ClosureDispatcher::SweepAcks() {
  // Oldest first; an entry whose answers a push or a lost worker already
  // released finds nothing to answer.
  const uint64_t now = uv_now(loop_);
  const uint64_t hold = options_.report_ack_hold_ms;
  while (!held_order_.empty() && now - held_order_.front().first >= hold) {
    auto entry = live_.find(held_order_.front().second);
    if (entry != live_.end()) ReleaseAcks(entry->second, hold);
    held_order_.pop_front();
  }
  if (held_order_.empty()) {
    ack_timer_->Stop();
    ack_running_ = false;
  }
}

}  // namespace dispatch::reactor
