#include "reactor/closure_timings.h"

namespace dispatch::reactor {

void ClosureTimings::Queued(uint64_t closure_id, uint64_t now_ns) {
  auto it = since_.find(closure_id);
  if (it != since_.end()) {
    it->second = {now_ns, false};  // put back
  } else if (since_.size() >= max_tracked_) {
    ++untracked_;
  } else {
    since_.emplace(closure_id, Since{now_ns, false});
  }
}

void ClosureTimings::Assigned(uint64_t closure_id, uint64_t now_ns) {
  auto it = since_.find(closure_id);
  if (it == since_.end()) {
    if (since_.size() >= max_tracked_) {
      ++untracked_;
      return;
    }
    it = since_.emplace(closure_id, Since{now_ns, true}).first;
  } else if (!it->second.running) {
    queue_wait_.Observe(static_cast<double>(now_ns - it->second.ns) * 1e-9);
  }
  it->second = {now_ns, true};
}

void ClosureTimings::Ended(uint64_t closure_id, uint64_t now_ns, bool observe) {
  auto it = since_.find(closure_id);
  if (it == since_.end()) return;
  if (observe && it->second.running)
    execution_.Observe(static_cast<double>(now_ns - it->second.ns) * 1e-9);
  since_.erase(it);
}

void ClosureTimings::Observe(journal::Update::Reader update, uint64_t now_ns) {
  switch (update.which()) {
    case journal::Update::CLOSURE_BATCH: {
      auto batch = update.getClosureBatch();
      switch (batch.which()) {
        case journal::ClosureBatch::SCHEDULED:
          for (auto item : batch.getScheduled()) Queued(item.getClosureId(), now_ns);
          break;
        case journal::ClosureBatch::ASSIGNED:
          for (auto item : batch.getAssigned()) Assigned(item.getClosureId(), now_ns);
          break;
        case journal::ClosureBatch::FINISHED:
          for (auto item : batch.getFinished()) Ended(item.getClosureId(), now_ns, true);
          break;
        case journal::ClosureBatch::CANCELLED:
          for (uint64_t id : batch.getCancelled()) Ended(id, now_ns, false);
          break;
        case journal::ClosureBatch::RELEASED:
          for (uint64_t id : batch.getReleased()) Ended(id, now_ns, false);
          break;
      }
      break;
    }
    case journal::Update::CLOSURE_FAILED: {
      auto failed = update.getClosureFailed();
      // A worker's report ends a run; the dispatcher's own failing does not.
      Ended(failed.getClosureId(), now_ns, failed.getWorkerId() != 0);
      break;
    }
    case journal::Update::CLOSURE_PUT_BACK:
      Queued(update.getClosurePutBack().getClosureId(), now_ns);
      break;
    default:
      break;
  }
}

}  // namespace dispatch::reactor
