// The data service's timers, on the loop like everything else: job GC (every
// --job-gc-check-interval-ms, a job with no client for --job-gc-timeout-ms is
// garbage-collected: state::PlanJobGc) and liveness (workers past
// --worker-timeout-ms are removed, the DYNAMIC and OFF tasks of addresses
// without a worker for --worker-grace-ms handed over:
// state::PlanTaskHandOvers, consumers past --client-timeout-ms released:
// state::PlanClientTimeouts). Every change they make is an Update
// journaled in the pass's group commit.

#include <algorithm>

#include "common/log.h"
#include "reactor/data_service.h"
#include "state/consumer_planner.h"
#include "state/hand_over_planner.h"
#include "state/job_planner.h"

namespace dispatch::reactor {

void DataService::StartTimers() {
  if (options_.job_gc_check_interval_ms > 0) {
    job_gc_timer_ = std::make_unique<uvkj::UvRepeatingTimer>(
        loop_, options_.job_gc_check_interval_ms, [this]() { RunJobGc(); });
    job_gc_timer_->Unref();
    job_gc_timer_->Start();
  }
  // Fine enough to notice a timeout within a quarter of it.
  uint64_t shortest = UINT64_MAX;
  if (options_.worker_timeout_ms > 0) shortest = std::min(shortest, options_.worker_timeout_ms);
  if (options_.client_timeout_ms > 0) shortest = std::min(shortest, options_.client_timeout_ms);
  // Every removal starts a grace period (one of 0 is carried at the removal).
  if (policy_.worker_grace_ms > 0) shortest = std::min(shortest, policy_.worker_grace_ms);
  if (shortest != UINT64_MAX) {
    uint64_t period = std::clamp<uint64_t>(shortest / 4, 5, 1000);
    liveness_timer_ = std::make_unique<uvkj::UvRepeatingTimer>(loop_, period, [this, period]() {
      serving_clock_.Tick(period);
      RunLivenessCheck();
    });
    liveness_timer_->Unref();
    liveness_timer_->Start();
  }
}

void DataService::StopTimers() {
  if (job_gc_timer_) job_gc_timer_->Stop();
  if (liveness_timer_) liveness_timer_->Stop();
  (void)closures_->FlushReleases();  // journaled with the shutdown's last commit
}

void DataService::RunJobGc() {
  if (durable_.pipeline().failed()) return;
  state::JobGcPlan plan = state::PlanJobGc(state(), Stamp(), policy_);
  for (size_t i = 0; i < plan.jobs.size(); ++i) {
    const uint64_t job_id = plan.jobs[i].job_id;
    Status status = CarryOne(plan.updates, i);
    if (!status.ok()) {
      Log(LogLevel::kWarning, "job GC of job ", job_id, " failed: ", status.ToString().c_str());
      continue;
    }
    ++stats_.jobs_garbage_collected;
    Log(LogLevel::kInfo, "garbage-collected job ", job_id, ": no client for ",
        options_.job_gc_timeout_ms, " ms");
    for (auto& [address, ids] : plan.jobs[i].tasks)
      workers_.PushDeleteTasks(address, std::move(ids));
  }
  soft_.Apply(plan.soft);
}

void DataService::RunLivenessCheck() {
  if (durable_.pipeline().failed()) return;
  workers_.CheckTimeouts();
  RunHandOvers();
  state::ClientTimeoutPlan plan =
      state::PlanClientTimeouts(state(), soft_, serving_clock_.NowMs(), Stamp(), policy_);
  for (size_t i = 0; i < plan.released.size(); ++i) {
    if (!CarryOne(plan.updates, i).ok()) continue;
    ++stats_.clients_timed_out;
    Log(LogLevel::kInfo, "released job client ", plan.released[i], ": no heartbeat for ",
        options_.client_timeout_ms, " ms");
  }
  soft_.Apply(plan.soft);
}

void DataService::RunHandOvers() {
  if (durable_.pipeline().failed()) return;
  state::TaskHandOverPlan plan =
      state::PlanTaskHandOvers(state(), soft_, serving_clock_.NowMs(), policy_, Stamp());
  for (size_t i = 0; i < plan.task_ids.size(); ++i) {
    Status status = CarryOne(plan.updates, i);
    if (!status.ok()) {
      Log(LogLevel::kWarning, "handing over task ", plan.task_ids[i], " failed: ",
          status.ToString().c_str());
      continue;
    }
    ++stats_.tasks_handed_over;
    Log(LogLevel::kInfo, "handed over task ", plan.task_ids[i], ": no worker at ",
        plan.addresses[i].c_str(), " for ", policy_.worker_grace_ms, " ms");
  }
  soft_.Apply(plan.soft);
}

}  // namespace dispatch::reactor
