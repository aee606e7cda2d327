// CoordinatorSession: the Coordinator capability one openCoordinator call
// hands out. It schedules (waiting for queue room), reports each outcome of
// its coordinator's closures once (long-poll awaitResults), answers join and
// done, raises the coordinator's first error once, and creates per-worker
// resources. It lives as long as capnp holds it (the client's reference, or
// a call of it still running after the connection went), and holds the
// ClosureDispatcher that long: once that is closed (shutdown), calls fail
// with Unavailable and calls waiting are cancelled (CancelOnClose).
// REQUIRES: loop thread only.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "reactor/outcome_reply.h"
#include "reactor/rpc_metrics.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::reactor {

class ClosureDispatcher;

class CoordinatorSession final : public rpc::Coordinator::Server {
 public:
  // `metrics` (may be null) counts this session's calls (RpcMetrics).
  CoordinatorSession(kj::Own<ClosureDispatcher> closures, uint64_t coordinator_id,
                     kj::Own<RpcMetrics> metrics = kj::Own<RpcMetrics>());
  ~CoordinatorSession() noexcept(false);

  uint64_t coordinator_id() const { return coordinator_id_; }

  // A closure of this coordinator became finished, failed or cancelled (in
  // the current pass; replies that report it wait for the pass's commit).
  void OnClosureDone(uint64_t closure_id);
  // The coordinator has a first error now.
  void OnFirstError();

  // Every failed call's exception carries a code (DispatchWithPeerErrors).
  DispatchCallResult dispatchCall(uint64_t interface_id, uint16_t method_id,
                                  capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) override;

 protected:
  kj::Promise<void> schedule(ScheduleContext context) override;
  kj::Promise<void> awaitResults(AwaitResultsContext context) override;
  kj::Promise<void> join(JoinContext context) override;
  kj::Promise<void> createPerWorkerResource(CreatePerWorkerResourceContext context) override;
  kj::Promise<void> getOutcomes(GetOutcomesContext context) override;
  kj::Promise<void> cancel(CancelContext context) override;

 private:
  // The dispatcher, or Unavailable once it is closed.
  ClosureDispatcher& Dispatcher();
  // Decode, plan and carry of one schedule call (ClosureDispatcher::ScheduleCall),
  // then the answer encoded: false when the call is to be scheduled and
  // holds no room yet (`has_room`), nothing answered.
  bool Answered(ClosureDispatcher& closures, ScheduleContext& context, bool has_room);
  // Takes up to `max` undelivered outcomes (and up to the per-call limits)
  // off undelivered_, forgetting released ones (state::PickResults).
  std::vector<uint64_t> PickResults(uint32_t max);
  // Pops released outcomes off the front of undelivered_
  // (state::ForgottenAtFront); true when one is left to deliver.
  bool SkipReleased();
  // Answers with undelivered outcomes, once there are some. `releases`: the
  // call released some, to be journaled (FlushReleases) before it answers.
  kj::Promise<void> WaitForResults(AwaitResultsContext context, uint32_t max, bool releases);
  // Answers with those PickResults takes (outcome_reply.h); put back first
  // in line when the call fails.
  kj::Promise<void> DeliverResults(AwaitResultsContext context, uint32_t max, bool releases);
  // The reply's Barrier; with traced outcomes, their commit and reply stamps
  // are set once it resolves (the reply's message lives until then).
  kj::Promise<void> ReplyAfterCommit(TracedLists traced);
  kj::Promise<void> Join(JoinContext context);
  void WakeJoiners();

  kj::Own<ClosureDispatcher> closures_;  // never null: set once, held to the end
  const uint64_t coordinator_id_;
  kj::Own<RpcMetrics> metrics_;  // may be null
  // Outcomes this session has not returned yet, oldest first.
  std::deque<uint64_t> undelivered_;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> results_waiter_;
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> join_waiters_;
};

}  // namespace dispatch::reactor
