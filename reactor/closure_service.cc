// DispatcherService: closures. openCoordinator hands out a CoordinatorSession
// for the caller's coordinator id; reportClosures carries a worker's outcomes
// (fenced by worker id and attempt); getClosureStats counts for tests,
// dispatchctl and benchmarks; cancelCoordinator is `dispatchctl cancel`.

#include "reactor/closure_dispatcher.h"
#include "reactor/coordinator_session.h"
#include "reactor/data_service.h"
#include "reactor/dispatcher_server.h"
#include "reactor/service_util.h"
#include "reactor/services.h"

namespace dispatch::reactor {

kj::Promise<void> DispatcherService::openCoordinator(OpenCoordinatorContext context) {
  DataService& data = this->data();
  const uint64_t coordinator_id = context.getParams().getCoordinatorId();
  if (coordinator_id == 0)
    ThrowStatus(InvalidArgumentError("coordinator id 0 is reserved: choose a nonzero id"));
  auto results = context.getResults();
  results.setCoordinator(kj::heap<CoordinatorSession>(kj::addRef(data.closures()), coordinator_id,
                                                     kj::addRef(server_.rpc_metrics())));
  results.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::reportClosures(ReportClosuresContext context) {
  DataService& data = this->data();
  auto params = context.getParams();
  const uint64_t worker_id = params.getWorkerId();
  const state::Worker* worker = data.state().FindWorker(worker_id);
  context.getResults().setIncarnation(data.incarnation());
  if (worker == nullptr) {
    // Removed (and its closures put back): its reports are stale, not errors.
    data.closures().CountIgnored(params.getReports().size());
    context.getResults().setIgnored(params.getReports().size());
    return data.durable().pipeline().Barrier();
  }
  // Large results are written to their files first (ClosureDispatcher::Report).
  return data.closures().Report(worker_id, params.getReports())
      .then([this, context](uint32_t ignored) mutable {
        context.getResults().setIgnored(ignored);
        return this->data().durable().pipeline().Barrier();
      });
}

kj::Promise<void> DispatcherService::getClosureStats(GetClosureStatsContext context) {
  DataService& data = this->data();
  const state::DispatcherState& state = data.state();
  const ClosureCounters& counters = data.closures().counters();
  auto stats = context.getResults().initStats();
  stats.setQueued(state.NumClosuresInState(state::ClosureState::QUEUED));
  stats.setAssigned(state.NumClosuresInState(state::ClosureState::ASSIGNED));
  stats.setFinished(state.NumClosuresInState(state::ClosureState::FINISHED));
  stats.setFailed(state.NumClosuresInState(state::ClosureState::FAILED));
  stats.setCancelled(state.NumClosuresInState(state::ClosureState::CANCELLED));
  stats.setScheduledTotal(counters.scheduled);
  stats.setResultsAccepted(counters.results_accepted);
  stats.setReportsIgnored(counters.reports_ignored);
  stats.setPutBack(counters.put_back);
  stats.setTransientRetries(counters.transient_retries);
  stats.setAttemptsExhausted(counters.attempts_exhausted);
  stats.setReleasedTotal(counters.released);
  stats.setPushesFailed(counters.pushes_failed);
  stats.setScheduleWaits(counters.schedule_waits);
  stats.setResultsOverLimit(counters.results_over_limit);
  const ResultStats& durable = data.durable().results().stats();
  stats.setResultsStored(durable.results_stored);
  stats.setResultsRead(durable.results_read);
  stats.setResultsDamaged(durable.results_damaged);
  stats.setResultsReadOffLoop(durable.results_read_off_loop);
  stats.setQueuedWithoutWorker(data.closures().NumUnrunnable());
  stats.setCancelRequested(counters.cancel_requested);
  stats.setCancelledRunning(counters.cancelled_running);
  stats.setDeadlinesExceeded(counters.deadlines_exceeded);
  stats.setLateReportsIgnored(counters.late_reports_ignored);
  stats.setWaiting(state.NumClosuresInState(state::ClosureState::WAITING));
  stats.setInputBytesPushed(data.closures().counters().input_bytes_pushed);
  stats.setInputsOverLimit(data.closures().counters().inputs_over_limit);
  stats.setRefusalsRepeated(counters.refusals_repeated);
  stats.setRefusalsForgotten(data.closures().refused_schedules().evicted());
  stats.setTracesDropped(data.closures().traces().dropped());
  stats.setStuckEpisodes(server_.closure_watchdog().episodes());
  stats.setStuckClosures(server_.closure_watchdog().stuck_closures());
  context.getResults().setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::cancelCoordinator(CancelCoordinatorContext context) {
  DataService& data = this->data();
  const uint64_t cancelled =
      ValueOrThrow(data.closures().CancelCoordinator(context.getParams().getCoordinatorId()));
  auto results = context.getResults();
  results.setCancelled(cancelled);
  results.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

}  // namespace dispatch::reactor
