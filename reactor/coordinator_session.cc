#include "reactor/coordinator_session.h"

#include <kj/debug.h>

#include <optional>
#include <vector>

#include "common/log.h"
#include "reactor/closure_dispatcher.h"
#include "reactor/outcome_reply.h"
#include "reactor/service_util.h"
#include "state/bytes.h"
#include "state/result_bytes.h"
#include "state/result_picker.h"
#include "common/closure_trace.h"

namespace dispatch::reactor {
CoordinatorSession::CoordinatorSession(kj::Own<ClosureDispatcher> closures,
                                       uint64_t coordinator_id, kj::Own<RpcMetrics> metrics)
    : closures_(kj::mv(closures)), coordinator_id_(coordinator_id), metrics_(kj::mv(metrics)) {
  // A new session reports every outcome not released yet, in id order.
  ClosureDispatcher& dispatcher = Dispatcher();
  for (uint64_t id :
       state::OwedOutcomes(dispatcher.state(), dispatcher.pending_releases(), coordinator_id))
    undelivered_.push_back(id);
  dispatcher.AddSession(this);
}

// closures_ is still ours here, closed or not.
CoordinatorSession::~CoordinatorSession() noexcept(false) { closures_->RemoveSession(this); }

ClosureDispatcher& CoordinatorSession::Dispatcher() {
  if (closures_->closed()) ThrowStatus(UnavailableError("the dispatcher is shutting down"));
  return *closures_;
}

capnp::Capability::Server::DispatchCallResult CoordinatorSession::dispatchCall(
    uint64_t interface_id, uint16_t method_id,
    capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) {
  DispatchCallResult result = DispatchWithPeerErrors([&]() {
    return rpc::Coordinator::Server::dispatchCall(interface_id, method_id, context);
  });
  if (metrics_.get() != nullptr) {
    result.promise = metrics_->Track(interface_id, method_id, kj::mv(result.promise));
  }
  return result;
}

void CoordinatorSession::OnClosureDone(uint64_t closure_id) {
  undelivered_.push_back(closure_id);
  KJ_IF_MAYBE (waiter, results_waiter_) {
    (*waiter)->fulfill();
    results_waiter_ = nullptr;
  }
  // Called by the dispatcher, which is open then.
  if (closures_->state().NumUnfinishedClosures(coordinator_id_) == 0) WakeJoiners();
}

void CoordinatorSession::OnFirstError() { WakeJoiners(); }

void CoordinatorSession::WakeJoiners() {
  for (auto& waiter : join_waiters_) waiter->fulfill();
  join_waiters_.clear();
}

kj::Promise<void> CoordinatorSession::schedule(ScheduleContext context) {
  ClosureDispatcher& closures = Dispatcher();
  const uint64_t n = context.getParams().getClosures().size();
  if (n > closures.options().max_closures_per_call) {
    ThrowStatus(InvalidArgumentError("a schedule call of " + std::to_string(n) +
                                     " closures is over the limit of " +
                                     std::to_string(closures.options().max_closures_per_call)));
  }
  // Refused, or a retry: answered without waiting for room.
  if (Answered(closures, context, /*has_room=*/false)) {
    return closures.durable().pipeline().Barrier();
  }
  return closures.CancelOnClose(closures.WaitForRoom(n).then([this, context](
                                                                kj::Own<ClosureDispatcher::Room> room) mutable {
    ClosureDispatcher& closures = Dispatcher();
    // Planned again: a copy of this call refused, or an error that arrived,
    // while this one waited is answered as if it came now.
    Answered(closures, context, /*has_room=*/true);
    room = nullptr;  // the closures are in the queue now, counted there
    return closures.durable().pipeline().Barrier();
  }));
}

bool CoordinatorSession::Answered(ClosureDispatcher& closures, ScheduleContext& context,
                                  bool has_room) {
  std::optional<state::ScheduleCallPlan> plan = ValueOrThrow(
      closures.ScheduleCall(coordinator_id_, context.getParams().getClosures(), has_room));
  if (!plan.has_value()) return false;
  if (plan->refused) {
    auto error = context.getResults().initError();
    if (plan->refusal.closure_id != 0) {
      error.setClosureId(plan->refusal.closure_id);
      error.setMessage(plan->refusal.error);
    }
    return true;
  }
  auto list = context.getResults().initClosureIds(static_cast<unsigned>(plan->ids.size()));
  for (unsigned i = 0; i < plan->ids.size(); ++i) list.set(i, plan->ids[i]);
  return true;
}

std::vector<uint64_t> CoordinatorSession::PickResults(uint32_t max) {
  ClosureDispatcher& closures = Dispatcher();
  const state::ResultLimits limits{closures.options().max_results_per_call,
                                   closures.options().max_result_bytes_per_call};
  state::ResultPick pick = state::PickResults(closures.state(), closures.pending_releases(),
                                              undelivered_, max, limits, closures.options().policy);
  undelivered_.erase(undelivered_.begin(), undelivered_.begin() + pick.taken);
  return std::move(pick.ids);
}

kj::Promise<void> CoordinatorSession::DeliverResults(AwaitResultsContext context, uint32_t max,
                                                     bool releases) {
  std::vector<uint64_t> ids = PickResults(max);
  // Not delivered if the call fails: the next call has them, first.
  auto put_back = [this, ids]() { undelivered_.insert(undelivered_.begin(), ids.begin(), ids.end()); };
  FilledOutcomes filled;
  try {
    // The call's releases go with this pass, so the reply's Barrier covers them.
    if (releases) ThrowIfError(Dispatcher().FlushReleases());
    filled = FillOutcomes(Dispatcher(), coordinator_id_, ids, OnReleased::kSkip,
                          [context](unsigned n) mutable { return context.getResults().initResults(n); });
  } catch (...) {
    put_back();
    throw;
  }
  if (filled.now.has_value()) return ReplyAfterCommit(kj::mv(*filled.now));
  return Dispatcher()
      .CancelOnClose(kj::mv(filled.later).catch_([put_back](kj::Exception&& e)
                                                     -> std::optional<TracedLists> {
        put_back();
        kj::throwFatalException(kj::mv(e));
      }))
      .then([this, context, max](std::optional<TracedLists> traced) mutable -> kj::Promise<void> {
        // Every one was released meanwhile (another session): wait again.
        if (!traced.has_value()) return WaitForResults(context, max, /*releases=*/false);
        return ReplyAfterCommit(kj::mv(*traced));
      });
}

kj::Promise<void> CoordinatorSession::ReplyAfterCommit(TracedLists traced) {
  DurableState& durable = Dispatcher().durable();
  if (traced.empty()) return durable.pipeline().Barrier();
  return durable.pipeline().Barrier().then([&durable, traced = kj::mv(traced)]() {
    const uint64_t now = uv_hrtime();
    for (auto list : traced) {
      list.set(kTraceCommitStarted, durable.pipeline().last_commit_start_ns());
      list.set(kTraceCommitEnded, durable.pipeline().last_commit_end_ns());
      list.set(kTraceReplied, now);
    }
  });
}

bool CoordinatorSession::SkipReleased() {
  ClosureDispatcher& closures = Dispatcher();
  const size_t forgotten =
      state::ForgottenAtFront(closures.state(), closures.pending_releases(), undelivered_);
  undelivered_.erase(undelivered_.begin(), undelivered_.begin() + forgotten);
  return !undelivered_.empty();
}

kj::Promise<void> CoordinatorSession::WaitForResults(AwaitResultsContext context, uint32_t max,
                                                     bool releases) {
  if (SkipReleased()) return DeliverResults(context, max, releases);
  if (results_waiter_ != nullptr) {
    if (releases) ThrowIfError(Dispatcher().FlushReleases());
    ThrowStatus(FailedPreconditionError("coordinator " + std::to_string(coordinator_id_) +
                                        ": this session already has an awaitResults waiting"));
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  results_waiter_ = kj::mv(paf.fulfiller);
  // Shaped as Join's wait is, so that replies waiting on one commit leave in
  // the order the calls were woken (see FillOutcomes).
  return Dispatcher().CancelOnClose(paf.promise.then([this, context, max, releases]() mutable {
    // Usually journaled meanwhile (kReleaseDelayMs); if not, with this pass.
    return WaitForResults(context, max, releases);
  }));
}

kj::Promise<void> CoordinatorSession::awaitResults(AwaitResultsContext context) {
  ClosureDispatcher& closures = Dispatcher();
  auto params = context.getParams();
  ThrowIfError(closures.Release(coordinator_id_, params.getRelease()));
  // Whatever this call answers, its releases are journaled before the answer
  // leaves (FlushReleases, then the reply's Barrier), so an acknowledged
  // release is durable (held ones excepted, see ClosureDispatcher::Release).
  return WaitForResults(context, params.getMaxResults(), params.getRelease().size() > 0);
}

kj::Promise<void> CoordinatorSession::join(JoinContext context) { return Join(context); }

kj::Promise<void> CoordinatorSession::Join(JoinContext context) {
  ClosureDispatcher& closures = Dispatcher();
  auto results = context.getResults();
  if (closures.state().FindCoordinatorError(coordinator_id_) != nullptr) {
    ThrowIfError(closures.TakeFirstError(coordinator_id_, results.initError()));
    results.setDone(false);
    results.setUnfinished(closures.state().NumUnfinishedClosures(coordinator_id_));
    return closures.durable().pipeline().Barrier();
  }
  const uint64_t unfinished = closures.state().NumUnfinishedClosures(coordinator_id_);
  if (unfinished == 0 || !context.getParams().getWait()) {
    results.setDone(unfinished == 0);
    results.setUnfinished(unfinished);
    return closures.durable().pipeline().Barrier();
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  join_waiters_.push_back(kj::mv(paf.fulfiller));
  return closures.CancelOnClose(
      paf.promise.then([this, context]() mutable { return Join(context); }));
}

kj::Promise<void> CoordinatorSession::createPerWorkerResource(
    CreatePerWorkerResourceContext context) {
  ClosureDispatcher& closures = Dispatcher();
  auto params = context.getParams();
  context.getResults().setResourceId(
      ValueOrThrow(closures.CreateResource(coordinator_id_, View(params.getFunction()),
                                           View(params.getArgs()), params.getRequestId())));
  return closures.durable().pipeline().Barrier();
}

kj::Promise<void> CoordinatorSession::getOutcomes(GetOutcomesContext context) {
  ClosureDispatcher& closures = Dispatcher();
  auto ids = context.getParams().getClosureIds();
  std::vector<uint64_t> wanted;
  uint64_t bytes = 0;
  for (uint64_t id : ids) {
    const state::Closure* closure = closures.state().FindClosure(id);
    if (closure == nullptr || closure->coordinator_id != coordinator_id_ ||
        closures.ReleasePending(id)) {
      ThrowStatus(UnknownClosureError(id, coordinator_id_));
    }
    wanted.push_back(id);
    bytes += state::OutcomeBytes(*closure);
  }
  // Every asked-for outcome goes in one reply, so its bytes must fit the
  // per-call budget (one closure always may, whatever its size).
  const uint64_t budget = closures.options().max_result_bytes_per_call;
  if (wanted.size() > 1 && bytes > budget) {
    ThrowStatus(ResourceExhaustedError(
        "getOutcomes of " + std::to_string(wanted.size()) + " closures would carry " +
        std::to_string(bytes) + " bytes of results, over the limit of " + std::to_string(budget) +
        " bytes per call (--max-result-bytes-per-call); ask for fewer closures at a time"));
  }
  // Released meanwhile by another session: NotFound, as if asked for after.
  FilledOutcomes filled =
      FillOutcomes(closures, coordinator_id_, kj::mv(wanted), OnReleased::kNotFound,
                   [context](unsigned n) mutable { return context.getResults().initOutcomes(n); });
  if (filled.now.has_value()) return closures.durable().pipeline().Barrier();
  return closures.CancelOnClose(kj::mv(filled.later)).then([this](std::optional<TracedLists>) {
    return Dispatcher().durable().pipeline().Barrier();
  });
}

kj::Promise<void> CoordinatorSession::cancel(CancelContext context) {
  ClosureDispatcher& closures = Dispatcher();
  auto ids = context.getParams().getClosureIds();
  if (ids.size() > closures.options().max_closures_per_call) {
    ThrowStatus(InvalidArgumentError("a cancel call of " + std::to_string(ids.size()) +
                                     " closures is over the limit of " +
                                     std::to_string(closures.options().max_closures_per_call) +
                                     " (--max-closures-per-call)"));
  }
  std::vector<state::ClosureState> states;
  ThrowIfError(closures.Cancel(coordinator_id_, ids, states));
  auto out = context.getResults().initStates(static_cast<unsigned>(states.size()));
  for (unsigned i = 0; i < states.size(); ++i) out.set(i, states[i]);
  return closures.durable().pipeline().Barrier();
}

}  // namespace dispatch::reactor
