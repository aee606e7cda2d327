// getSplit over RPC: splits in order, end of splits then the next
// repetition, an older repetition answered with end of splits, retries by
// sequence, batches, payloads of an explicit split source, clear errors, and
// 100,000 splits read by 4 simulated workers each handed out exactly once per
// repetition.
#include <gtest/gtest.h>
#include <kj/vector.h>

#include <algorithm>
#include <random>

#include "tests/dataservice/ds_test_util.h"

namespace dispatch::testing {
namespace {

using rpc::ProcessingMode;

struct DynamicJob {
  JobIds ids;
  std::vector<std::unique_ptr<SimWorker>> workers;
  std::vector<uint64_t> tasks;  // one per worker
};

DynamicJob StartDynamicJob(ClientLoop& loop, DsClient& client, const std::string& address,
                           int num_workers, const DatasetSpec& dataset) {
  DynamicJob job;
  for (int i = 0; i < num_workers; ++i) {
    job.workers.push_back(
        std::make_unique<SimWorker>(loop, address, "worker-" + std::to_string(i)));
    EXPECT_TRUE(job.workers.back()->Heartbeat().ok());
  }
  auto dataset_id = client.RegisterDataset(dataset);
  EXPECT_TRUE(dataset_id.ok());
  job.ids = *client.GetOrCreateJob({.dataset_id = *dataset_id, .mode = ProcessingMode::DYNAMIC});
  for (auto& worker : job.workers) {
    EXPECT_TRUE(worker->Heartbeat().ok());
    job.tasks.push_back(worker->TaskOf(job.ids.job_id)->task_id);
  }
  return job;
}

TEST(Splits, InOrderThenEndOfSplitsThenTheNextRepetition) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto job = StartDynamicJob(loop, client, dispatcher.address(), 2,
                             {.definition = "d", .indexed_splits = 3});
  uint64_t a = job.tasks[0], b = job.tasks[1];
  EXPECT_EQ(client.GetSplit(a, 0, 1)->indices, std::vector<uint64_t>{0});
  EXPECT_EQ(client.GetSplit(b, 0, 1)->indices, std::vector<uint64_t>{1});
  EXPECT_EQ(client.GetSplit(a, 0, 2)->indices, std::vector<uint64_t>{2});
  auto end = *client.GetSplit(b, 0, 2);
  EXPECT_TRUE(end.end_of_splits);
  EXPECT_TRUE(end.indices.empty());
  EXPECT_EQ(end.incarnation, client.Incarnation());
  // Repetition 0 is over for everyone.
  auto late = *client.GetSplit(a, 0, 3);
  EXPECT_TRUE(late.end_of_splits);
  EXPECT_EQ(late.repetition, 0);
  // Repetition 1 starts from the beginning.
  auto next = *client.GetSplit(a, 1, 4);
  EXPECT_EQ(next.indices, std::vector<uint64_t>{0});
  EXPECT_EQ(next.repetition, 1);
  auto ahead = client.GetSplit(b, 5, 3);
  EXPECT_EQ(ahead.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(ahead.status().message().find("repetition 1"), std::string::npos)
      << ahead.status().message();
}

TEST(Splits, ARetryWithTheSameSequenceGetsTheSameAnswer) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto job = StartDynamicJob(loop, client, dispatcher.address(), 2,
                             {.definition = "d", .indexed_splits = 100});
  auto first = *client.GetSplit(job.tasks[0], 0, 1, 10);
  EXPECT_EQ(client.GetSplit(job.tasks[1], 0, 1, 5)->indices.front(), 10u);
  auto retry = *client.GetSplit(job.tasks[0], 0, 1, 10);
  EXPECT_EQ(retry.indices, first.indices);
  auto next = *client.GetSplit(job.tasks[0], 0, 2, 1);
  EXPECT_EQ(next.indices, std::vector<uint64_t>{15});
  auto stale = client.GetSplit(job.tasks[0], 0, 1);
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("older"), std::string::npos) << stale.status().message();
}

// The sequence rules PROTOCOL.md states: any nonzero first value (a worker
// process that takes over a task continues above the old one's numbers),
// gaps allowed, a retry recognised by its sequence alone (the answer of the
// first request, whatever the retry's other fields), and only the latest
// sequence kept: an older one, even one answered before, is refused.
TEST(Splits, SequencesStartAnywhereAboveZeroMaySkipAndOnlyTheLatestIsAnsweredAgain) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto job = StartDynamicJob(loop, client, dispatcher.address(), 1,
                             {.definition = "d", .indexed_splits = 100});
  const uint64_t task = job.tasks[0];
  EXPECT_EQ(client.GetSplit(task, 0, 1000)->indices, std::vector<uint64_t>{0});
  EXPECT_EQ(client.GetSplit(task, 0, 5000)->indices, std::vector<uint64_t>{1});
  auto retry = *client.GetSplit(task, 0, 5000, /*max_splits=*/10);
  EXPECT_EQ(retry.indices, std::vector<uint64_t>{1}) << "a retry gets the first answer";
  EXPECT_EQ(retry.repetition, 0);
  for (uint64_t older : {4999u, 1000u}) {
    auto refused = client.GetSplit(task, 0, older);
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << older;
    EXPECT_NE(refused.status().message().find("older than its last request, sequence 5000"),
              std::string::npos)
        << refused.status().message();
  }
  EXPECT_EQ(client.GetSplit(task, 0, 5001)->indices, std::vector<uint64_t>{2});
}

TEST(Splits, ExplicitSplitSourcesHandOutTheirPayloads) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto job =
      StartDynamicJob(loop, client, dispatcher.address(), 1,
                      {.definition = "files", .explicit_splits = {"a.rec", "b.rec", "c.rec"}});
  auto batch = *client.GetSplit(job.tasks[0], 0, 1, 10);
  EXPECT_EQ(batch.indices, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(batch.payloads, (std::vector<std::string>{"a.rec", "b.rec", "c.rec"}));
  EXPECT_FALSE(batch.end_of_splits);
  EXPECT_TRUE(client.GetSplit(job.tasks[0], 0, 2, 10)->end_of_splits);
}

TEST(Splits, BadRequestsGetClearErrors) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto job = StartDynamicJob(loop, client, dispatcher.address(), 1,
                             {.definition = "d", .indexed_splits = 3});
  auto provider = client.GetSplit(job.tasks[0], 0, 1, 1, /*provider=*/2);
  EXPECT_EQ(provider.status().code(), StatusCode::kNotFound);
  EXPECT_NE(provider.status().message().find("job " + std::to_string(job.ids.job_id) +
                                             " has no split provider 2"),
            std::string::npos)
      << provider.status().message();
  auto unknown = client.GetSplit(999, 0, 1);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("task 999"), std::string::npos);
  EXPECT_EQ(client.GetSplit(job.tasks[0], 0, 0).status().code(), StatusCode::kInvalidArgument);
  auto off = *client.GetOrCreateJob(
      {.dataset_id = *client.RegisterDataset({.definition = "d", .indexed_splits = 3})});
  ASSERT_TRUE(job.workers[0]->Heartbeat().ok());
  auto off_task = job.workers[0]->TaskOf(off.job_id)->task_id;
  auto not_dynamic = client.GetSplit(off_task, 0, 1);
  EXPECT_EQ(not_dynamic.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(not_dynamic.status().message().find("not DYNAMIC"), std::string::npos);
}

// A dispatcher with workers "dies" and "lives" registered and a dataset of
// `splits` indexed splits.
struct DiesAndLives {
  explicit DiesAndLives(uint64_t splits)
      : client(loop, dispatcher.address()),
        dies(loop, dispatcher.address(), "dies"),
        lives(loop, dispatcher.address(), "lives") {
    EXPECT_TRUE(dies.Heartbeat().ok());
    EXPECT_TRUE(lives.Heartbeat().ok());
    dataset = *client.RegisterDataset({.definition = "d", .indexed_splits = splits});
  }
  // A DYNAMIC job of the dataset, with a task on each worker (they learnt of).
  JobIds Dynamic(bool requeue) {
    JobIds job = *client.GetOrCreateJob({.dataset_id = dataset,
                                         .mode = ProcessingMode::DYNAMIC,
                                         .requeue_unfinished_splits = requeue});
    EXPECT_TRUE(dies.Heartbeat().ok());
    EXPECT_TRUE(lives.Heartbeat().ok());
    return job;
  }
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client;
  SimWorker dies;
  SimWorker lives;
  uint64_t dataset = 0;
};

TEST(Splits, WithRequeueADeadWorkersOutstandingSplitsGoToOthersOtherwiseTheyAreLost) {
  DiesAndLives world(10);
  ClientLoop& loop = world.loop;
  DsClient& client = world.client;
  SimWorker& dies = world.dies;
  SimWorker& lives = world.lives;
  const JobIds requeue = world.Dynamic(/*requeue=*/true);
  const JobIds lossy = world.Dynamic(/*requeue=*/false);
  EXPECT_EQ(client.GetSplit(dies.TaskOf(requeue.job_id)->task_id, 0, 1, 3)->indices,
            (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(client.GetSplit(dies.TaskOf(lossy.job_id)->task_id, 0, 1, 3)->indices,
            (std::vector<uint64_t>{0, 1, 2}));
  dies.Disconnect();
  ASSERT_TRUE(WaitUntil([&] { return client.GetWorkers()->size() == 1; }, loop));
  // At least once: the dead worker's splits come first.
  EXPECT_EQ(client.GetSplit(lives.TaskOf(requeue.job_id)->task_id, 0, 1, 5)->indices,
            (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  // At most once (the reference's default): they are gone.
  EXPECT_EQ(client.GetSplit(lives.TaskOf(lossy.job_id)->task_id, 0, 1, 5)->indices,
            (std::vector<uint64_t>{3, 4, 5, 6, 7}));
}

// A requeueing job does not end a repetition while a split of it may come
// back: the live worker is told "none now" (no splits, not the end) until
// the dead worker's splits are requeued to it, then the end.
TEST(Splits, ARequeueingJobSaysNoneNowUntilADeadWorkersSplitsComeBack) {
  DiesAndLives world(3);
  DsClient& client = world.client;
  const JobIds job = world.Dynamic(/*requeue=*/true);
  const uint64_t held = world.dies.TaskOf(job.job_id)->task_id;
  const uint64_t waits = world.lives.TaskOf(job.job_id)->task_id;
  EXPECT_EQ(client.GetSplit(held, 0, 1, 3)->indices, (std::vector<uint64_t>{0, 1, 2}));
  Result<SplitView> none = client.GetSplit(waits, 0, 1, 3);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->indices.empty());
  EXPECT_FALSE(none->end_of_splits) << "the repetition ended while task " << held << " held splits";
  world.dies.Disconnect();
  ASSERT_TRUE(WaitUntil([&] { return client.GetWorkers()->size() == 1; }, world.loop));
  EXPECT_EQ(client.GetSplit(waits, 0, 2, 3)->indices, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_TRUE(client.GetSplit(waits, 0, 3, 3)->end_of_splits);
}

// Reads one repetition to its end with the workers interleaved (each keeps
// one request in flight), returning how often each split was handed out.
std::vector<int> ReadRepetition(ClientLoop& loop, DsClient& client,
                                const std::vector<uint64_t>& tasks, int64_t repetition,
                                std::vector<uint64_t>& sequences, uint64_t num_splits,
                                std::mt19937_64& rng) {
  std::vector<int> seen(num_splits, 0);
  std::vector<bool> finished(tasks.size(), false);
  size_t open = tasks.size();
  while (open > 0) {
    // Every unfinished worker asks at once; the dispatcher answers each.
    kj::Vector<kj::Promise<SplitView>> replies;
    std::vector<size_t> who;
    for (size_t w = 0; w < tasks.size(); ++w) {
      if (finished[w]) continue;
      uint32_t batch = static_cast<uint32_t>(1 + rng() % 400);
      replies.add(client.GetSplitAsync(tasks[w], repetition, ++sequences[w], batch));
      who.push_back(w);
    }
    auto all = loop.Wait(kj::joinPromises(replies.releaseAsArray()));
    for (size_t i = 0; i < all.size(); ++i) {
      for (uint64_t index : all[i].indices) {
        EXPECT_LT(index, num_splits);
        if (index < num_splits) ++seen[index];
      }
      if (all[i].end_of_splits) {
        finished[who[i]] = true;
        --open;
      }
    }
  }
  return seen;
}

TEST(Splits, HundredThousandSplitsReadByFourWorkersAreEachHandedOutOncePerRepetition) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr uint64_t kSplits = 100000;
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto job = StartDynamicJob(loop, client, dispatcher.address(), 4,
                             {.definition = "big", .indexed_splits = kSplits});
  std::vector<uint64_t> sequences(4, 0);
  for (int64_t repetition = 0; repetition < 2; ++repetition) {
    auto seen = ReadRepetition(loop, client, job.tasks, repetition, sequences, kSplits, rng);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(kSplits))
        << "repetition " << repetition << ": missing " << std::count(seen.begin(), seen.end(), 0)
        << ", twice or more "
        << std::count_if(seen.begin(), seen.end(), [](int n) { return n > 1; });
  }
}

}  // namespace
}  // namespace dispatch::testing
