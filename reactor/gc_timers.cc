// The data service's timers, on the loop like everything else: job GC (every
// --job-gc-check-interval-ms, a job with no client for --job-gc-timeout-ms is
// garbage-collected) and liveness (workers past --worker-timeout-ms are
// removed, consumers past --client-timeout-ms released). Every change they
// make is an Update journaled in the pass's group commit.

#include <algorithm>

#include "common/log.h"
#include "reactor/data_service.h"

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
  if (durable_.failed()) return;
  const int64_t now = durable_.NowMicros();
  const int64_t timeout = static_cast<int64_t>(options_.job_gc_timeout_ms) * 1000;
  std::vector<uint64_t> expired;
  for (const state::Job* job : state().ListJobs()) {
    if (job->finished || job->num_clients > 0 || job->last_client_released_micros < 0) continue;
    if (now - job->last_client_released_micros < timeout) continue;
    expired.push_back(job->id);
  }
  for (uint64_t job_id : expired) {
    auto tasks = TasksByWorker(job_id);
    Status status = Submit([job_id](journal::Update::Builder update) {
      update.initGarbageCollectJob().setJobId(job_id);
    });
    if (!status.ok()) {
      Log(LogLevel::kWarning, "job GC of job ", job_id, " failed: ", status.ToString().c_str());
      continue;
    }
    ++stats_.jobs_garbage_collected;
    Log(LogLevel::kInfo, "garbage-collected job ", job_id, ": no client for ",
        options_.job_gc_timeout_ms, " ms");
    for (auto& [address, ids] : tasks) {
      for (uint64_t id : ids) consumers_.ForgetTask(id);
      workers_.PushDeleteTasks(address, std::move(ids));
    }
  }
}

void DataService::RunLivenessCheck() {
  if (durable_.failed()) return;
  workers_.CheckTimeouts();
  if (options_.client_timeout_ms == 0) return;
  for (uint64_t client_id : consumers_.TimedOut(options_.client_timeout_ms)) {
    const state::JobClient* client = state().FindJobClient(client_id);
    if (client == nullptr) {
      consumers_.Forget(client_id);
      continue;
    }
    consumers_.Released(client_id, client->job_id);
    Status status = Submit([client_id](journal::Update::Builder update) {
      update.initReleaseJobClient().setJobClientId(client_id);
    });
    if (status.ok()) {
      ++stats_.clients_timed_out;
      Log(LogLevel::kInfo, "released job client ", client_id, ": no heartbeat for ",
          options_.client_timeout_ms, " ms");
    }
  }
}

}  // namespace dispatch::reactor
