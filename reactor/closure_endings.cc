// ClosureDispatcher: endings the caller asked for ahead of time. A cancel
// (Coordinator.cancel) and a passed deadline (ClosureSpec.timeoutMs) are the
// planner's decisions (state/closure_endings.h); here they are journaled, the
// deadline timer is kept at the earliest deadline, and the workers that ran
// the ended closures are told (WorkerControl.cancelClosures, best effort).

#include <algorithm>

#include "common/log.h"
#include "reactor/closure_dispatcher.h"
#include "state/closure_endings.h"

namespace dispatch::reactor {

Status ClosureDispatcher::Cancel(uint64_t coordinator_id,
                                 capnp::List<uint64_t>::Reader closure_ids,
                                 std::vector<state::ClosureState>& states) {
  std::vector<uint64_t> asked;
  asked.reserve(closure_ids.size());
  for (uint64_t id : closure_ids) asked.push_back(id);
  Result<state::CancelPlan> plan =
      state::PlanCancel(state(), coordinator_id, asked, pending_releases_, Stamp());
  if (!plan.ok()) return plan.status();
  DISPATCH_RETURN_IF_ERROR(CarryCancel(plan->ending));
  states = std::move(plan->states);
  return Status::Ok();
}

Result<uint64_t> ClosureDispatcher::CancelCoordinator(uint64_t coordinator_id) {
  Result<state::EndingPlan> plan = state::PlanCancelCoordinator(state(), coordinator_id, Stamp());
  if (!plan.ok()) return plan.status();
  DISPATCH_RETURN_IF_ERROR(CarryCancel(*plan));
  if (plan->num_ended > 0) {
    Log(LogLevel::kInfo, "cancelled ", plan->num_ended, " closures of coordinator ",
        coordinator_id, " (cancelCoordinator)");
  }
  return plan->num_ended;
}

Status ClosureDispatcher::CarryCancel(const state::EndingPlan& plan) {
  DISPATCH_RETURN_IF_ERROR(Carry(plan.updates));
  counters_.cancel_requested += plan.num_ended;
  for (const auto& [worker_id, ids] : plan.running) counters_.cancelled_running += ids.size();
  TellEnded(plan.running);
  return Status::Ok();
}

void ClosureDispatcher::TellEnded(const std::map<uint64_t, std::vector<uint64_t>>& running) {
  for (const auto& [worker_id, ids] : running) {
    auto entry = live_.find(worker_id);
    if (entry == live_.end()) continue;  // gone: nothing runs there any more
    const std::string address = entry->second.address;
    // After the commit: a worker never drops a closure whose end could still
    // be lost with the process (a restart would put it back in the queue).
    // `ids = ids`: clang 14 (the fuzz build) cannot capture a structured
    // binding by name.
    AddTask(durable_.pipeline().Barrier().then([this, address, ids = ids]() -> kj::Promise<void> {
      rpc::WorkerControl::Client* control = workers_.ControlOf(address);
      if (control == nullptr) return kj::READY_NOW;
      auto request = control->cancelClosuresRequest();
      auto list = request.initClosureIds(static_cast<unsigned>(ids.size()));
      for (unsigned i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
      // Best effort: an old worker without the method, or a broken
      // connection, only means the late report is ignored.
      return request.send().then([](auto&&) {},
                                 [address](kj::Exception&& e) {
                                   Log(LogLevel::kDebug, "cancelClosures to ", address.c_str(),
                                       " failed: ", e.getDescription());
                                 });
    }));
  }
}

void ClosureDispatcher::ArmDeadlineTimer() {
  if (closed_) return;
  const int64_t earliest = state().EarliestClosureDeadline();
  if (earliest == 0) return;
  if (deadline_armed_micros_ != 0 && deadline_armed_micros_ <= earliest) return;
  deadline_armed_micros_ = earliest;
  const int64_t wait_us = std::max<int64_t>(0, earliest - durable_.pipeline().NowMicros());
  // Rounded up: firing a millisecond late is fine, early only costs a re-arm.
  const uint64_t wait_ms = static_cast<uint64_t>((wait_us + 999) / 1000);
  uvkj::CheckUv(uv_timer_start(deadline_timer_.get(), &ClosureDispatcher::OnDeadlineTimer,
                               wait_ms, 0),
                "uv_timer_start");
}

void ClosureDispatcher::OnDeadlineTimer(uv_timer_t* handle) {
  if (auto* self = static_cast<ClosureDispatcher*>(handle->data)) self->OnDeadlines();
}

void ClosureDispatcher::OnDeadlines() {
  deadline_armed_micros_ = 0;
  if (closed_) return;
  state::EndingPlan plan = state::PlanDeadlines(state(), Stamp());
  Status status = Carry(plan.updates);
  if (!status.ok()) {
    Log(LogLevel::kWarning, "could not fail closures past their deadline: ",
        status.ToString().c_str());
    // Tried again in a second, not in a busy loop.
    deadline_armed_micros_ = state().EarliestClosureDeadline();
    uvkj::CheckUv(uv_timer_start(deadline_timer_.get(), &ClosureDispatcher::OnDeadlineTimer,
                                 1000, 0),
                  "uv_timer_start");
    return;
  }
  TellEnded(plan.running);
  ArmDeadlineTimer();  // the next deadline, or one not yet past (the clocks differ)
}

}  // namespace dispatch::reactor
