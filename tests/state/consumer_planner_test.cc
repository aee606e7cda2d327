// The consumers' decisions (state/consumer_planner.h) and the rounds they
// read (state/consumer_rounds.h): the round-robin agreement on a pending task
// (accept when blocked in time, reject when past it, the target moving out
// exponentially), the answer read from the state the updates leave, release,
// task removal by every consumer at one round, client timeouts, and the
// errors a late client gets. Every plan is applied to prove its Updates valid.

#include "state/consumer_planner.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "state/dispatcher_state.h"
#include "tests/state/planner_test_support.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"
#include "tests/support/test_seed.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

// Round-robin job 1 of two consumers (clients 1 and 2) on dataset 1; task 1
// active on "a"; task 2 pending on "b", to start at round 10.
DispatcherState RoundRobin() {
  JobOptions options;
  options.num_consumers = 2;
  DispatcherState state;
  ApplyEach(state, RegisterDataset(1, 100), RegisterWorker(1, "a"), RegisterWorker(2, "b"),
            CreateJob(1, 1, options), AcquireJobClient(1, 1), AcquireJobClient(2, 1),
            CreateTask(1, 1, "a"), CreatePendingTask(2, 1, "b", 10));
  return state;
}

ClientHeartbeatRequest Beat(uint64_t client, int64_t current, int64_t blocked = -1) {
  return ClientHeartbeatRequest{client, current, blocked};
}

// Plans the heartbeat and applies its Updates and soft changes; the answer.
ClientHeartbeatAnswer Heard(DispatcherState& state, SoftState& soft,
                            const ClientHeartbeatRequest& request, uint64_t now_ms = 10,
                            const DataPolicy& policy = {}) {
  Result<ClientHeartbeatPlan> plan =
      PlanClientHeartbeat(state, soft, request, now_ms, kStamp, policy);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  EXPECT_TRUE(AppliesAll(state, plan->updates));
  soft.Apply(plan->soft);
  return AnswerClientHeartbeat(state, plan->job_id);
}

IdList TaskIds(const ClientHeartbeatAnswer& answer) {
  IdList ids;
  for (const Task* task : answer.tasks) ids.push_back(task->id);
  return ids;
}

TEST(ConsumerPlanner, ConsumersBlockedInTimeAcceptAndTheLastAcceptanceStartsTheTask) {
  DispatcherState state = RoundRobin();
  SoftState soft;
  // Not there yet and not blocked: nothing changes, the answer says where to block.
  ClientHeartbeatAnswer answer = Heard(state, soft, Beat(1, 8));
  EXPECT_EQ(answer.block_round, 10);
  EXPECT_EQ(TaskIds(answer), (IdList{1}));
  EXPECT_EQ(soft.consumers.Round(1), 8);
  answer = Heard(state, soft, Beat(1, 9, 9));  // blocked before the target: accepts
  EXPECT_EQ(answer.block_round, 10);
  EXPECT_TRUE(state.PendingTasks(1).front()->ready_clients.contains(1));
  // Accepting again changes nothing.
  EXPECT_TRUE(PlanClientHeartbeat(state, soft, Beat(1, 9, 9), 10, kStamp, {})->updates.empty());
  answer = Heard(state, soft, Beat(2, 10, 10));
  EXPECT_EQ(answer.block_round, -1);
  EXPECT_EQ(TaskIds(answer), (IdList{1, 2}));
  EXPECT_EQ(state.FindTask(2)->starting_round, 10);
  EXPECT_FALSE(state.FindTask(2)->pending);
}

TEST(ConsumerPlanner, AConsumerPastTheTargetRejectsItAndTheTargetMovesOutExponentially) {
  DispatcherState state = RoundRobin();
  SoftState soft;
  Heard(state, soft, Beat(1, 9, 9));  // client 1 accepted at 10
  // At the target without blocking: too late. Past the furthest round it
  // reported (14) by 2.
  Heard(state, soft, Beat(2, 14));
  EXPECT_EQ(Heard(state, soft, Beat(2, 12)).block_round, 16);
  EXPECT_TRUE(state.PendingTasks(1).front()->ready_clients.empty());
  // The next rejection moves it 4 past the target, then 8.
  EXPECT_EQ(Heard(state, soft, Beat(1, 17)).block_round, 21);
  EXPECT_EQ(Heard(state, soft, Beat(2, 22)).block_round, 30);
  EXPECT_EQ(state.PendingTasks(1).front()->failures, 3);
}

TEST(ConsumerPlanner, APlantedBugAcceptsWhateverRoundTheConsumerIsAt) {
  DispatcherState state = RoundRobin();
  SoftState soft;
  DataPolicy buggy;
  buggy.planted_bug = PlantedBug::kRoundRobinIgnoresRounds;
  Heard(state, soft, Beat(1, 40), 10, buggy);
  EXPECT_TRUE(state.PendingTasks(1).front()->ready_clients.contains(1));
}

TEST(ConsumerPlanner, LateClientsAreToldWhatBecameOfThem) {
  DispatcherState state = RoundRobin();
  SoftState soft;
  Result<ReleasePlan> release = PlanReleaseJobClient(state, 1, kStamp);
  ASSERT_TRUE(release.ok());
  ASSERT_TRUE(AppliesAll(state, release->updates));
  soft.Apply(release->soft);
  const Status released = PlanClientHeartbeat(state, soft, Beat(1, 0), 10, kStamp, {}).status();
  EXPECT_EQ(released.code(), StatusCode::kNotFound);
  EXPECT_EQ(released.message(),
            "job client 1 of job 1 was released (by the client, or after no heartbeat for "
            "--client-timeout-ms)");
  // Released again (a retry after a lost reply): nothing to do.
  release = PlanReleaseJobClient(state, 1, kStamp);
  ASSERT_TRUE(release.ok());
  EXPECT_TRUE(release->updates.empty());
  EXPECT_EQ(PlanReleaseJobClient(state, 9, kStamp).status().code(), StatusCode::kNotFound);

  EXPECT_EQ(PlanClientHeartbeat(state, soft, Beat(9, 0), 10, kStamp, {}).status().message(),
            "job client 9 is unknown (released, timed out, or never created)");
  DataPolicy forgetful;
  forgetful.fault_tolerant_mode = false;
  EXPECT_EQ(PlanClientHeartbeat(state, soft, Beat(9, 0), 10, kStamp, forgetful).status().message(),
            "job client 9 is unknown; the dispatcher runs without fault-tolerant mode "
            "(--fault-tolerant-mode=false), so a dispatcher restart may have forgotten it");

  const std::string collected =
      "job 1 has been garbage-collected after having no client for --job-gc-timeout-ms; "
      "consider a higher --job-gc-timeout-ms";
  release = PlanReleaseJobClient(state, 2, kStamp);
  ASSERT_TRUE(AppliesAll(state, release->updates));
  soft.Apply(release->soft);
  ASSERT_TRUE(Applies(state, GarbageCollectJob(1)));
  const Status late = PlanClientHeartbeat(state, soft, Beat(1, 0), 10, kStamp, {}).status();
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(late.message(), collected);
}

TEST(ConsumerPlanner, ATaskIsRemovedOnceEveryConsumerAskedAtOneRound) {
  DispatcherState state = RoundRobin();
  SoftState soft;
  auto ask = [&](uint32_t consumer, int64_t round) {
    Result<RemoveTaskPlan> plan = PlanMaybeRemoveTask(state, soft, {1, consumer, round}, kStamp);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_TRUE(AppliesAll(state, plan->updates));
    soft.Apply(plan->soft);
    return std::move(*plan);
  };
  EXPECT_FALSE(ask(0, 5).removed);
  EXPECT_FALSE(ask(1, 6).removed);  // another round: starts over
  EXPECT_FALSE(ask(0, 5).removed);  // and again
  EXPECT_FALSE(ask(0, 5).removed);  // the same consumer twice is one
  RemoveTaskPlan removed = ask(1, 5);
  EXPECT_TRUE(removed.removed);
  EXPECT_EQ(removed.worker_address, "a");
  EXPECT_EQ(state.FindTask(1), nullptr);
  EXPECT_FALSE(soft.consumers.WouldAgree(1, 0, 5, 2));  // the agreement ended
  // Gone: removed, for every retry.
  EXPECT_TRUE(ask(0, 5).removed);

  EXPECT_EQ(PlanMaybeRemoveTask(state, soft, {2, 0, 5}, kStamp).status().message(),
            "task 2 is pending (not yet accepted by the consumers) and cannot be removed");
  EXPECT_EQ(PlanMaybeRemoveTask(state, soft, {2, 2, 5}, kStamp).status().message(),
            "consumer index 2 of job 1 is out of range: it has 2 consumers");
  ApplyEach(state, CreateJob(2, 1), CreateTask(3, 2, "a"));
  EXPECT_EQ(PlanMaybeRemoveTask(state, soft, {3, 0, 5}, kStamp).status().message(),
            "task 3 belongs to job 2, which is not round robin; only round-robin tasks are "
            "removed");
}

TEST(ConsumerPlanner, ClientsSilentPastTheTimeoutAreReleased) {
  DispatcherState state = RoundRobin();
  SoftState soft;
  soft.Initialize(state, 100, 7);
  Heard(state, soft, Beat(2, 3), 200);
  soft.consumers.Heard(9, -1, 100, 7);  // gone from the state
  DataPolicy policy;
  policy.client_timeout_ms = 150;
  EXPECT_TRUE(PlanClientTimeouts(state, soft, 250, kStamp, policy).released.empty());
  ClientTimeoutPlan plan = PlanClientTimeouts(state, soft, 251, kStamp, policy);
  EXPECT_EQ(plan.released, (IdList{1}));
  EXPECT_EQ(plan.soft.clients_forgotten, (IdList{9}));
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  soft.Apply(plan.soft);
  EXPECT_EQ(state.FindJobClient(1), nullptr);
  EXPECT_EQ(soft.consumers.ReleasedJob(1), 1u);
  EXPECT_TRUE(PlanClientTimeouts(state, soft, 350, kStamp, policy).released.empty());
  policy.client_timeout_ms = 0;  // never
  EXPECT_TRUE(PlanClientTimeouts(state, soft, 100000, kStamp, policy).released.empty());
}

// WouldAgree says what recording the vote makes of the agreement, for any
// sequence of votes.
TEST(ConsumerRounds, WouldAgreeForeseesWhatTheVoteCompletes) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  std::mt19937_64 rng(seed);
  ConsumerRounds rounds;
  std::map<uint64_t, std::pair<int64_t, std::set<uint32_t>>> model;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t task = rng() % 3;
    const uint32_t consumer = static_cast<uint32_t>(rng() % 3);
    const int64_t round = static_cast<int64_t>(rng() % 2);
    auto& [at, voters] = model[task];
    if (voters.empty() || at != round) {
      at = round;
      voters.clear();
    }
    voters.insert(consumer);
    const bool agreed = voters.size() >= 3;
    ASSERT_EQ(rounds.WouldAgree(task, consumer, round, 3), agreed) << "seed " << seed;
    rounds.Vote(task, consumer, round);
    if (agreed) {
      rounds.ForgetTask(task);
      model.erase(task);
    }
  }
}

}  // namespace
}  // namespace dispatch::state
