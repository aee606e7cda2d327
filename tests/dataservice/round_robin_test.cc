// Round robin: three consumers read a job round by round from its tasks. A
// worker that joins mid-job gets a pending task; consumers that have already
// passed its target round reject it (the target moves exponentially later),
// and it becomes active only at a round all three accepted while blocked at
// or before it. No consumer has passed that round when the task appears.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "tests/dataservice/ds_test_util.h"

namespace dispatch::testing {
namespace {

struct Consumer {
  JobIds ids;
  int64_t round = 0;
  int64_t known_block = -1;
  bool blocked = false;
  std::optional<int64_t> saw_task_at_round;  // its round when the new task appeared
  std::optional<int64_t> starting_round;
};

TEST(RoundRobin, AWorkerJoiningMidJobStartsOnlyAtARoundAllConsumersAgreedOn) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker w1(loop, dispatcher.address(), "w1");
  SimWorker w2(loop, dispatcher.address(), "w2");
  ASSERT_TRUE(w1.Heartbeat().ok());
  ASSERT_TRUE(w2.Heartbeat().ok());
  uint64_t dataset = *client.RegisterDataset({.definition = "rr"});
  std::vector<Consumer> consumers(3);
  for (Consumer& c : consumers) {
    auto ids = client.GetOrCreateJob({.dataset_id = dataset, .name = "rr", .num_consumers = 3});
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    c.ids = *ids;
  }
  const uint64_t job_id = consumers[0].ids.job_id;
  for (Consumer& c : consumers) {
    EXPECT_EQ(c.ids.job_id, job_id);
    auto heartbeat = client.ClientHeartbeat(c.ids.job_client_id, 0);
    ASSERT_TRUE(heartbeat.ok());
    EXPECT_EQ(heartbeat->tasks.size(), 2u);
    for (const TaskView& task : heartbeat->tasks) EXPECT_EQ(task.starting_round, 0);
  }

  // Consumers read some rounds, at different speeds.
  for (int step = 0; step < 60; ++step) {
    Consumer& c = consumers[rng() % 3];
    c.round += static_cast<int64_t>(rng() % 3);
    ASSERT_TRUE(client.ClientHeartbeat(c.ids.job_client_id, c.round).ok());
  }

  // A third worker joins mid-job: its task is pending.
  SimWorker w3(loop, dispatcher.address(), "w3");
  ASSERT_TRUE(w3.Heartbeat().ok());
  ASSERT_TRUE(w3.TaskOf(job_id).has_value());
  EXPECT_TRUE(w3.TaskOf(job_id)->pending);
  const uint64_t new_task = w3.TaskOf(job_id)->task_id;

  int64_t first_block = -1;
  int64_t last_block = -1;
  int steps = 0;
  auto all_saw = [&] {
    return std::all_of(consumers.begin(), consumers.end(),
                       [](const Consumer& c) { return c.starting_round.has_value(); });
  };
  while (!all_saw()) {
    ASSERT_LT(++steps, 20000) << "consumers never agreed";
    Consumer& c = consumers[rng() % 3];
    if (!c.blocked) {
      int64_t next = c.round + static_cast<int64_t>(rng() % 4);
      if (c.known_block >= 0 && c.round <= c.known_block && !c.starting_round)
        next = std::min(next, c.known_block);
      c.round = next;
      c.blocked = !c.starting_round && c.round == c.known_block;
    }
    auto heartbeat = client.ClientHeartbeat(c.ids.job_client_id, c.round, c.blocked ? c.round : -1);
    ASSERT_TRUE(heartbeat.ok()) << heartbeat.status().ToString();
    if (heartbeat->block_round >= 0) {
      if (first_block < 0) first_block = heartbeat->block_round;
      last_block = heartbeat->block_round;
    }
    for (const TaskView& task : heartbeat->tasks) {
      if (task.task_id == new_task && !c.starting_round) {
        c.starting_round = task.starting_round;
        c.saw_task_at_round = c.round;
        c.blocked = false;
      }
    }
    if (!c.starting_round) {
      c.known_block = heartbeat->block_round;
      if (c.blocked && c.round != c.known_block) c.blocked = false;  // the target moved
    }
  }
  const int64_t start = *consumers[0].starting_round;
  for (const Consumer& c : consumers) {
    EXPECT_EQ(*c.starting_round, start) << "every consumer sees one starting round";
    EXPECT_LE(*c.saw_task_at_round, start)
        << "no consumer passed the agreed round before the task started";
  }
  EXPECT_EQ(start, last_block);
  EXPECT_GE(last_block, first_block);
  std::printf("pending task started at round %lld (first target %lld)\n",
              static_cast<long long>(start), static_cast<long long>(first_block));
  // The worker's task is active now, and the job has three tasks.
  auto tasks = client.ClientHeartbeat(consumers[0].ids.job_client_id, consumers[0].round)->tasks;
  EXPECT_EQ(tasks.size(), 3u);
}

TEST(RoundRobin, AConsumerAheadOfTheTargetRejectsItAndTheTargetMovesLater) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker w1(loop, dispatcher.address(), "w1");
  ASSERT_TRUE(w1.Heartbeat().ok());
  uint64_t dataset = *client.RegisterDataset({.definition = "rr"});
  auto a = *client.GetOrCreateJob({.dataset_id = dataset, .name = "rr", .num_consumers = 2});
  auto b = *client.GetOrCreateJob({.dataset_id = dataset, .name = "rr", .num_consumers = 2});
  ASSERT_TRUE(client.ClientHeartbeat(a.job_client_id, 3).ok());
  ASSERT_TRUE(client.ClientHeartbeat(b.job_client_id, 2).ok());
  SimWorker w2(loop, dispatcher.address(), "w2");
  ASSERT_TRUE(w2.Heartbeat().ok());
  auto first = *client.ClientHeartbeat(a.job_client_id, 3);
  EXPECT_EQ(first.block_round, 4) << "target: one round after the furthest consumer";
  // b races ahead past the target: rejected, target = its round + 2.
  auto rejected = *client.ClientHeartbeat(b.job_client_id, 6);
  EXPECT_EQ(rejected.block_round, 8);
  // a overshoots again: the offset doubles.
  auto again = *client.ClientHeartbeat(a.job_client_id, 9);
  EXPECT_EQ(again.block_round, 13);
  // Both block at 13 and accept; the task starts at 13.
  auto one = *client.ClientHeartbeat(b.job_client_id, 13, 13);
  EXPECT_EQ(one.tasks.size(), 1u);
  auto two = *client.ClientHeartbeat(a.job_client_id, 13, 13);
  ASSERT_EQ(two.tasks.size(), 2u);
  EXPECT_EQ(two.block_round, -1);
  for (const TaskView& task : two.tasks) {
    if (task.worker_address == "w2") {
      EXPECT_EQ(task.starting_round, 13);
    }
  }
}

}  // namespace
}  // namespace dispatch::testing
