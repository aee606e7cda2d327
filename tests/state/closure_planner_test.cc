// The closure planner's decisions, on states built with the update builders:
// assignment (FIFO, round robin, routed by registered functions, staggered
// start), what a run that ended without a result becomes, and cancel on a
// first error. Every plan is applied to prove its Updates valid in order.

#include "state/closure_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "common/closure_limits.h"
#include "state/closure_requests.h"
#include "state/dispatcher_state.h"
#include "tests/state/planner_test_support.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"
#include "tests/state/update_generator.h"
#include "tests/support/test_seed.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

// (closure, worker) of each run.
std::vector<std::pair<uint64_t, uint64_t>> Pairs(const std::vector<ClosureRun>& runs) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const ClosureRun& run : runs) out.emplace_back(run.closure_id, run.worker_id);
  return out;
}

// Workers 1 and 2; closures 1..n of coordinator 7 running `function`, queued in order.
DispatcherState Queued(uint64_t n, const std::string& function = "noop") {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterWorker(1, "a")));
  EXPECT_TRUE(Applies(state, RegisterWorker(2, "b")));
  for (uint64_t id = 1; id <= n; ++id)
    EXPECT_TRUE(Applies(state, ScheduleClosure(id, 7, function)));
  return state;
}

TEST(ClosurePlanner, AssignsTheQueueInOrderSpreadOverWorkersRoundRobin) {
  DispatcherState state = Queued(5);
  AssignmentPlan plan = PlanAssignments(state, {Live(1, 2), Live(2, 2)}, 0, 0, kStamp);
  EXPECT_EQ(Pairs(plan.runs),
            (std::vector<std::pair<uint64_t, uint64_t>>{{1, 1}, {2, 2}, {3, 1}, {4, 2}}));
  for (const ClosureRun& run : plan.runs) EXPECT_EQ(run.attempt, 1u);
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  EXPECT_EQ(state.NumClosuresOnWorker(1), 2u);
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::QUEUED)), (std::vector<uint64_t>{5}));
  // Full: nothing more.
  EXPECT_TRUE(PlanAssignments(state, {Live(1, 2), Live(2, 2)}, 0, 0, kStamp).runs.empty());
}

TEST(ClosurePlanner, TheTurnMovesTheFirstWorker) {
  DispatcherState state = Queued(1);
  AssignmentPlan plan = PlanAssignments(state, {Live(1, 1), Live(2, 1)}, 0, 1, kStamp);
  EXPECT_EQ(Pairs(plan.runs), (std::vector<std::pair<uint64_t, uint64_t>>{{1, 2}}));
}

TEST(ClosurePlanner, PausedStaggeredAndFullWorkersGetNothing) {
  DispatcherState state = Queued(3);
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  LiveWorker paused = Live(2, 4);
  paused.paused = true;
  LiveWorker staggered = Live(2, 4);
  staggered.eligible_at_ms = 500;
  EXPECT_TRUE(PlanAssignments(state, {Live(1, 1), paused}, 0, 0, kStamp).runs.empty());
  EXPECT_TRUE(PlanAssignments(state, {Live(1, 1), staggered}, 499, 0, kStamp).runs.empty());
  EXPECT_EQ(PlanAssignments(state, {Live(1, 1), staggered}, 500, 0, kStamp).runs.size(), 2u);
}

TEST(ClosurePlanner, StaggeredStartDelaysTheIthWorkerUpToTheMax) {
  ClosurePolicy policy;
  policy.start_delay_ms = 100;
  EXPECT_EQ(StartDelayMs(policy, 0), 100u);  // no max: every worker waits the delay
  EXPECT_EQ(StartDelayMs(policy, 5), 100u);
  policy.start_delay_max_ms = 250;
  EXPECT_EQ(StartDelayMs(policy, 0), 0u);
  EXPECT_EQ(StartDelayMs(policy, 2), 200u);
  EXPECT_EQ(StartDelayMs(policy, 3), 250u);
  EXPECT_EQ(StartDelayMs(policy, ~uint64_t{0}), 250u);
}

TEST(ClosurePlanner, ClosuresGoOnlyToWorkersThatRegisteredTheirFunction) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "b")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "echo")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(2, 7, "sleep")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(3, 7, "echo")));
  AssignmentPlan plan =
      PlanAssignments(state, {Live(1, 4, {"echo"}), Live(2, 4, {"sleep"})}, 0, 0, kStamp);
  EXPECT_EQ(Pairs(plan.runs), (std::vector<std::pair<uint64_t, uint64_t>>{{1, 1}, {2, 2}, {3, 1}}));
  ASSERT_TRUE(AppliesAll(state, plan.updates));
}

TEST(ClosurePlanner, AClosureNoWorkerCanRunWaitsWithoutHoldingUpTheRest) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "b")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "train")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(2, 7, "echo")));
  const std::vector<LiveWorker> echo_only = {Live(1, 4, {"echo"})};
  EXPECT_EQ(CountUnrunnable(state, echo_only), 1u);
  AssignmentPlan plan = PlanAssignments(state, echo_only, 0, 0, kStamp);
  EXPECT_EQ(Pairs(plan.runs), (std::vector<std::pair<uint64_t, uint64_t>>{{2, 1}}));
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::QUEUED);
  EXPECT_EQ(state.FindClosure(1)->attempts, 0u);

  // A worker that can run it arrives; a worker with no slots never counts.
  std::vector<LiveWorker> workers = {Live(1, 4, {"echo"}), Live(2, 0, {"train"})};
  EXPECT_EQ(CountUnrunnable(state, workers), 1u);
  workers[1].slots = 1;
  EXPECT_EQ(CountUnrunnable(state, workers), 0u);
  plan = PlanAssignments(state, workers, 0, 0, kStamp);
  EXPECT_EQ(Pairs(plan.runs), (std::vector<std::pair<uint64_t, uint64_t>>{{1, 2}}));
  ASSERT_TRUE(AppliesAll(state, plan.updates));
}

TEST(ClosurePlanner, AWorkerMustAlsoRegisterTheFunctionsOfTheClosuresResources) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "b")));
  ASSERT_TRUE(Applies(state, CreateResource(1, 7, "make_model")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "predict", "", 0, {1})));
  ASSERT_TRUE(Applies(state, ScheduleClosure(2, 7, "predict")));
  std::vector<LiveWorker> workers = {Live(1, 4, {"predict"})};
  EXPECT_EQ(CountUnrunnable(state, workers), 1u);
  EXPECT_EQ(Pairs(PlanAssignments(state, workers, 0, 0, kStamp).runs),
            (std::vector<std::pair<uint64_t, uint64_t>>{{2, 1}}));
  workers.push_back(Live(2, 4, {"predict", "make_model"}));
  EXPECT_EQ(CountUnrunnable(state, workers), 0u);
  AssignmentPlan plan = PlanAssignments(state, workers, 0, 0, kStamp);
  EXPECT_EQ(Pairs(plan.runs), (std::vector<std::pair<uint64_t, uint64_t>>{{1, 2}, {2, 1}}));
  ASSERT_TRUE(AppliesAll(state, plan.updates));
}

TEST(ClosurePlanner, AssignmentsAreCutIntoRecordsThatFitTheLimit) {
  DispatcherState state = Queued(300);
  AssignmentPlan plan =
      PlanAssignments(state, {Live(1, 200), Live(2, 200)}, 0, 0, Stamp{1000, 1024});
  EXPECT_EQ(plan.runs.size(), 300u);
  EXPECT_GT(plan.updates.size(), 1u);
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  EXPECT_EQ(state.NumClosuresInState(ClosureState::QUEUED), 0u);
}

// Closure 1 of coordinator 7 running on worker 1 as attempt `attempt`;
// closures 2 and 3 of coordinator 7 and 4 of coordinator 8 queued.
DispatcherState OneRunning(uint32_t attempt) {
  DispatcherState state = Queued(3);
  EXPECT_TRUE(Applies(state, ScheduleClosure(4, 8)));
  for (uint32_t a = 1; a <= attempt; ++a) {
    EXPECT_TRUE(Applies(state, AssignClosure(1, 1, a)));
    if (a < attempt) {
      EXPECT_TRUE(Applies(state, PutBackClosure(1, 1, a)));
    }
  }
  return state;
}

TEST(ClosurePlanner, ALostRunIsQueuedAgainUntilItsAttemptsAreUsedUp) {
  ClosurePolicy policy;
  policy.max_closure_attempts = 2;
  DispatcherState state = OneRunning(1);
  UpdateList plan = PlanRunEnded(state, policy, {1, 1, 1}, RunEnd::kWorkerLost, "gone", kStamp);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_TRUE(plan[0].isClosurePutBack());
  EXPECT_FALSE(plan[0].getClosurePutBack().getTransient());
  ASSERT_TRUE(AppliesAll(state, plan));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::QUEUED);
}

// The behaviour the planner changed: a closure whose workers failed it
// max_closure_attempts times fails, but is no first error and cancels nothing
// (before, it cancelled every queued closure of its coordinator).
TEST(ClosurePlanner, AttemptsUsedUpByLostWorkersFailTheClosureButNotItsCoordinator) {
  ClosurePolicy policy;
  policy.max_closure_attempts = 2;
  DispatcherState state = OneRunning(2);
  UpdateList plan = PlanRunEnded(state, policy, {1, 1, 2}, RunEnd::kWorkerLost, "gone", kStamp);
  ASSERT_EQ(plan.size(), 1u);
  ASSERT_TRUE(plan[0].isClosureFailed());
  EXPECT_TRUE(plan[0].getClosureFailed().getInfrastructure());
  EXPECT_FALSE(plan[0].getClosureFailed().getUserError());
  ASSERT_TRUE(AppliesAll(state, plan));
  const Closure* failed = state.FindClosure(1);
  EXPECT_EQ(failed->state, ClosureState::FAILED);
  EXPECT_NE(failed->error.find("ran 2 times (max_closure_attempts 2)"), std::string::npos);
  EXPECT_NE(failed->error.find("gone"), std::string::npos);
  EXPECT_EQ(state.FindCoordinatorError(7), nullptr);
  EXPECT_EQ(Ids(state.ClosuresInState(ClosureState::QUEUED)), (std::vector<uint64_t>{2, 3, 4}));
}

TEST(ClosurePlanner, TransientErrorsPastTheLimitAreTheFunctionsFirstError) {
  ClosurePolicy policy;
  policy.transient_retries = 1;
  DispatcherState state = OneRunning(1);
  UpdateList plan =
      PlanRunEnded(state, policy, {1, 1, 1}, RunEnd::kTransientError, "flaky", kStamp);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_TRUE(plan[0].getClosurePutBack().getTransient());
  ASSERT_TRUE(AppliesAll(state, plan));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 2, 2)));
  plan = PlanRunEnded(state, policy, {1, 2, 2}, RunEnd::kTransientError, "flaky", kStamp);
  ASSERT_TRUE(AppliesAll(state, plan));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::FAILED);
  EXPECT_NE(state.FindClosure(1)->error.find("transient error 2 times (limit 1 retries): flaky"),
            std::string::npos)
      << state.FindClosure(1)->error;
  ASSERT_NE(state.FindCoordinatorError(7), nullptr);
  EXPECT_EQ(state.FindCoordinatorError(7)->closure_id, 1u);
  // Coordinator 7's queue is cancelled; coordinator 8's is not.
  EXPECT_EQ(state.FindClosure(2)->state, ClosureState::CANCELLED);
  EXPECT_EQ(state.FindClosure(3)->state, ClosureState::CANCELLED);
  EXPECT_EQ(state.FindClosure(4)->state, ClosureState::QUEUED);
}

TEST(ClosurePlanner, AttemptsUsedUpByTransientErrorsAreTheFunctions) {
  ClosurePolicy policy;
  policy.max_closure_attempts = 1;
  DispatcherState state = OneRunning(1);
  UpdateList plan =
      PlanRunEnded(state, policy, {1, 1, 1}, RunEnd::kTransientError, "flaky", kStamp);
  ASSERT_TRUE(AppliesAll(state, plan));
  EXPECT_NE(state.FindClosure(1)->error.find("max_closure_attempts 1"), std::string::npos);
  EXPECT_NE(state.FindCoordinatorError(7), nullptr);
  EXPECT_EQ(state.FindClosure(2)->state, ClosureState::CANCELLED);
}

TEST(ClosurePlanner, AUserErrorFailsTheClosureAndCancelsItsCoordinatorsQueue) {
  DispatcherState state = OneRunning(1);
  ASSERT_TRUE(Applies(state, AssignClosure(2, 2, 1)));
  UpdateList plan = PlanUserError(state, {1, 1, 1}, "boom", kStamp);
  ASSERT_TRUE(AppliesAll(state, plan));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::FAILED);
  EXPECT_TRUE(state.FindClosure(1)->user_error);
  EXPECT_EQ(state.FindCoordinatorError(7)->error, "boom");
  EXPECT_EQ(state.FindClosure(2)->state, ClosureState::ASSIGNED);  // running: finishes normally
  EXPECT_EQ(state.FindClosure(3)->state, ClosureState::CANCELLED);
  EXPECT_EQ(state.FindClosure(4)->state, ClosureState::QUEUED);

  // A run of that coordinator ending while the error is pending is cancelled
  // rather than queued again.
  plan = PlanRunEnded(state, ClosurePolicy{}, {2, 2, 1}, RunEnd::kWorkerLost, "gone", kStamp);
  ASSERT_TRUE(AppliesAll(state, plan));
  EXPECT_EQ(state.FindClosure(2)->state, ClosureState::CANCELLED);
}

// The schedule retry the simulation found lost (tests/sim, pinned seeds 29,
// 152, 193, 294): its reply was lost, and by the retry the coordinator had a
// pending first error.
TEST(ClosurePlanner, AScheduleRetriedUnderAFirstErrorGetsItsIdsAndCancelsWhatIsNew) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "noop", "", /*request_id=*/50)));
  ASSERT_TRUE(Applies(state, ScheduleClosure(2, 7, "noop", "", /*request_id=*/51)));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(AppliesAll(state, PlanUserError(state, {1, 1, 1}, "boom", kStamp)));
  ASSERT_NE(state.FindCoordinatorError(7), nullptr);
  const std::string noop = "noop";
  auto closure = [&](uint64_t request_id) {
    return NewClosure{0, capnp::Text::Reader(noop.data(), noop.size()), {}, {}, request_id};
  };

  // Nothing of the call was seen: the error is to be raised, nothing planned.
  Result<std::optional<SchedulePlan>> fresh =
      PlanScheduleRetryUnderError(state, 7, {closure(60), closure(0)}, kStamp);
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(fresh->has_value());

  // A retry: its closures keep their ids, a new one is scheduled and cancelled.
  Result<std::optional<SchedulePlan>> retry =
      PlanScheduleRetryUnderError(state, 7, {closure(51), closure(52)}, kStamp);
  ASSERT_TRUE(retry.ok());
  ASSERT_TRUE(retry->has_value());
  EXPECT_EQ((*retry)->ids, (std::vector<uint64_t>{2, 3}));
  ASSERT_TRUE(AppliesAll(state, (*retry)->updates));
  EXPECT_EQ(state.FindClosure(2)->state, ClosureState::CANCELLED);  // cancelled by the error
  EXPECT_EQ(state.FindClosure(3)->state, ClosureState::CANCELLED);
  EXPECT_EQ(state.FindClosureByRequest(7, 52)->id, 3u);
  EXPECT_NE(state.FindCoordinatorError(7), nullptr);  // still pending, for the next call
}

// A late copy of a call the first error refused (tests/sim seeds 9557,
// 9623), alone or resent in one call with a scheduled one (seed 138).
TEST(ClosurePlanner, AfterARefusalOnlyACallThatAlsoRetriesScheduledClosuresGetsIds) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "noop", "", /*request_id=*/50)));
  const std::string noop = "noop";
  auto closure = [&](uint64_t request_id) {
    return NewClosure{0, capnp::Text::Reader(noop.data(), noop.size()), {}, {}, request_id};
  };
  auto refused = [](uint64_t request_id) { return request_id == 60 || request_id == 61; };

  // Only refused and new request ids: the refusal is repeated, nothing planned.
  Result<std::optional<SchedulePlan>> copy =
      PlanScheduleAfterRefusal(state, 7, {closure(60), closure(61), closure(62)}, refused, kStamp);
  ASSERT_TRUE(copy.ok());
  EXPECT_FALSE(copy->has_value());

  // With a scheduled one: every closure gets its id; refused ones never run,
  // a new one is queued.
  Result<std::optional<SchedulePlan>> merged =
      PlanScheduleAfterRefusal(state, 7, {closure(50), closure(60), closure(62)}, refused, kStamp);
  ASSERT_TRUE(merged.ok());
  ASSERT_TRUE(merged->has_value());
  ASSERT_EQ((*merged)->ids.size(), 3u);
  EXPECT_EQ((*merged)->ids[0], 1u);
  ASSERT_TRUE(AppliesAll(state, (*merged)->updates));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::QUEUED);  // left as it was
  EXPECT_EQ(state.FindClosure((*merged)->ids[1])->state, ClosureState::CANCELLED);
  EXPECT_EQ(state.FindClosure((*merged)->ids[2])->state, ClosureState::QUEUED);
  EXPECT_EQ(state.FindClosureByRequest(7, 60)->id, (*merged)->ids[1]);
}

// Found by the simulation (seed 361): a retry under a first error whose new
// closure names a failed input. That closure fails as it is scheduled, and
// the plan's cancel of it was refused.
TEST(ClosurePlanner, ARetryUnderAFirstErrorDoesNotCancelANewClosureWhoseInputFailed) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(1, 7, "noop", "", /*request_id=*/50)));
  ASSERT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  ASSERT_TRUE(AppliesAll(state, PlanUserError(state, {1, 1, 1}, "boom", kStamp)));
  const std::string noop = "noop";
  auto closure = [&](uint64_t request_id, std::vector<uint64_t> inputs) {
    NewClosure c{0, capnp::Text::Reader(noop.data(), noop.size()), {}, {}, request_id};
    c.inputs = std::move(inputs);
    return c;
  };
  Result<std::optional<SchedulePlan>> retry = PlanScheduleRetryUnderError(
      state, 7, {closure(50, {}), closure(51, {1}), closure(52, {kInputInCall + 1}),
                 closure(53, {})},
      kStamp);
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  ASSERT_TRUE(retry->has_value());
  ASSERT_TRUE(AppliesAll(state, (*retry)->updates));
  const std::vector<uint64_t>& ids = (*retry)->ids;
  EXPECT_EQ(state.FindClosure(ids[1])->state, ClosureState::FAILED);  // its input failed
  EXPECT_EQ(state.FindClosure(ids[2])->state, ClosureState::FAILED);  // and so did its input
  EXPECT_EQ(state.FindClosure(ids[3])->state, ClosureState::CANCELLED);
}

TEST(ClosurePlanner, ALostWorkersClosuresAreEachPlannedThenItCanBeRemoved) {
  ClosurePolicy policy;
  policy.max_closure_attempts = 2;
  DispatcherState state = OneRunning(2);  // closure 1: its last attempt
  ASSERT_TRUE(Applies(state, AssignClosures({{2, 1, 1}, {4, 1, 1}})));
  UpdateList plan = PlanWorkerLost(state, policy, 1, "its connection dropped", kStamp);
  EXPECT_EQ(plan.size(), 3u);
  ASSERT_TRUE(AppliesAll(state, plan));
  EXPECT_EQ(state.FindClosure(1)->state, ClosureState::FAILED);
  EXPECT_NE(state.FindClosure(1)->error.find("its connection dropped"), std::string::npos);
  EXPECT_EQ(state.FindClosure(2)->state, ClosureState::QUEUED);
  EXPECT_EQ(state.FindClosure(4)->state, ClosureState::QUEUED);
  EXPECT_TRUE(Applies(state, RemoveWorker(1)));
}

TEST(ClosurePlanner, RecoveryQueuesEveryRunningClosureAgain) {
  DispatcherState state = OneRunning(1);
  ASSERT_TRUE(Applies(state, AssignClosure(2, 2, 1)));
  UpdateList plan = PlanRecovery(state, kStamp);
  EXPECT_EQ(plan.size(), 2u);
  ASSERT_TRUE(AppliesAll(state, plan));
  EXPECT_EQ(state.NumClosuresInState(ClosureState::ASSIGNED), 0u);
  EXPECT_EQ(state.FindClosure(1)->attempts, 1u);
}

// Random states (the UpdateGenerator's) and random live workers: every plan
// applies in order, assignments only fill free slots of eligible workers that
// registered every function the closure needs, and a lost worker keeps no
// closure. DISPATCH_TEST_SEED replays a run.
TEST(ClosurePlanner, EveryPlanAppliesAndKeepsItsRulesOnRandomStates) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  UpdateGenerator generator(seed);
  ClosurePolicy policy;
  policy.max_closure_attempts = rng() % 4;  // 0: retry forever
  policy.transient_retries = rng() % 3;
  static const std::vector<std::string> kFunctions = {"noop", "echo", "sleep",
                                                      "fail", "make", "open"};
  DispatcherState state;
  uint64_t assigned = 0;
  for (int step = 0; step < 4000; ++step) {
    ASSERT_TRUE(Applies(state, generator.Next(state)));
    if (step % 8 != 0) continue;
    std::vector<LiveWorker> live;
    for (const Worker* worker : state.ListWorkers()) {
      if (rng() % 4 == 0) continue;  // not connected
      FunctionSet functions;
      for (const std::string& f : kFunctions) {
        if (rng() % 4 != 0) functions.insert(f);
      }
      LiveWorker w = Live(worker->id, static_cast<uint32_t>(rng() % 4), functions);
      w.paused = rng() % 8 == 0;
      w.eligible_at_ms = rng() % 4 == 0 ? 100 : 0;
      live.push_back(std::move(w));
    }
    const uint64_t now_ms = rng() % 200;
    AssignmentPlan plan = PlanAssignments(state, live, now_ms, rng(), kStamp);
    std::map<uint64_t, uint64_t> added;
    for (const ClosureRun& run : plan.runs) {
      const Closure* closure = state.FindClosure(run.closure_id);
      ASSERT_EQ(closure->state, ClosureState::QUEUED);
      ASSERT_EQ(run.attempt, closure->attempts + 1);
      auto worker = std::find_if(live.begin(), live.end(),
                                 [&](const LiveWorker& w) { return w.worker_id == run.worker_id; });
      ASSERT_NE(worker, live.end());
      EXPECT_FALSE(worker->paused);
      EXPECT_GE(now_ms, worker->eligible_at_ms);
      EXPECT_TRUE(
          CanRun(*worker->functions,
                 NeededFunctions(state, ClosureKind{closure->function_name, closure->resources})));
      ++added[run.worker_id];
    }
    for (const auto& [worker_id, n] : added) {
      auto worker = std::find_if(live.begin(), live.end(),
                                 [&](const LiveWorker& w) { return w.worker_id == worker_id; });
      EXPECT_LE(state.NumClosuresOnWorker(worker_id) + n, worker->slots);
    }
    assigned += plan.runs.size();
    ASSERT_TRUE(AppliesAll(state, plan.updates));
    EXPECT_LE(CountUnrunnable(state, live), state.NumClosuresInState(ClosureState::QUEUED));

    std::vector<const Closure*> running = state.ClosuresInState(ClosureState::ASSIGNED);
    if (!running.empty()) {
      const Closure* c = running[rng() % running.size()];
      const ClosureRun run{c->id, c->worker_id, c->attempts};
      const uint64_t how = rng() % 3;
      UpdateList ended =
          how == 2 ? PlanUserError(state, run, "boom", kStamp)
                   : PlanRunEnded(state, policy, run,
                                  how == 0 ? RunEnd::kWorkerLost : RunEnd::kTransientError, "why",
                                  kStamp);
      ASSERT_TRUE(AppliesAll(state, ended));
    }
    std::vector<const Worker*> workers = state.ListWorkers();
    if (!workers.empty() && rng() % 6 == 0) {
      const uint64_t lost = workers[rng() % workers.size()]->id;
      ASSERT_TRUE(AppliesAll(state, PlanWorkerLost(state, policy, lost, "gone", kStamp)));
      EXPECT_TRUE(state.ClosuresOnWorker(lost).empty());
    }
    if (rng() % 50 == 0) {
      ASSERT_TRUE(AppliesAll(state, PlanRecovery(state, kStamp)));
    }
  }
  EXPECT_GT(assigned, 0u);
}

}  // namespace
}  // namespace dispatch::state
