// Exactly once across dispatcher crashes: a DYNAMIC job over 100,000 splits
// read by 4 simulated workers while the dispatcher is killed -9 and restarted
// on the same work dir three times mid-epoch. Each worker retries the request
// it had in flight with the same sequence number: an answer that reached it
// before the crash is answered again identically, one that never committed is
// answered afresh. In the end every split was handed out exactly once.
#include <gtest/gtest.h>
#include <kj/vector.h>
#include <signal.h>

#include <algorithm>
#include <optional>
#include <random>

#include "tests/dataservice/ds_test_util.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using rpc::ProcessingMode;

struct Request {
  size_t worker = 0;
  uint64_t sequence = 0;
  uint32_t batch = 0;
};

TEST(SplitsAcrossCrashes, HundredThousandSplitsExactlyOnceWithThreeKillNineRestarts) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr uint64_t kSplits = 100000;
  constexpr size_t kWorkers = 4;
  TempDir dir;
  const std::string work_dir = dir.File("work");
  auto dispatcher =
      std::make_unique<DispatcherProcess>(DispatcherProcess::Options{.work_dir = work_dir});
  ClientLoop loop;
  auto client = std::make_unique<DsClient>(loop, dispatcher->address());

  std::vector<uint64_t> tasks;
  uint64_t job_id;
  std::vector<std::unique_ptr<SimWorker>> workers;
  {
    for (size_t i = 0; i < kWorkers; ++i) {
      workers.push_back(
          std::make_unique<SimWorker>(loop, dispatcher->address(), "w" + std::to_string(i)));
      ASSERT_TRUE(workers.back()->Heartbeat().ok());
    }
    uint64_t dataset = *client->RegisterDataset({.definition = "big", .indexed_splits = kSplits});
    job_id =
        client->GetOrCreateJob({.dataset_id = dataset, .mode = ProcessingMode::DYNAMIC})->job_id;
    for (auto& worker : workers) {
      ASSERT_TRUE(worker->Heartbeat().ok());
      tasks.push_back(worker->TaskOf(job_id)->task_id);
    }
  }

  // Kill points: after this many splits were seen, mid-epoch.
  std::vector<uint64_t> kill_at = {kSplits / 5 + rng() % (kSplits / 10),
                                   kSplits / 2 + rng() % (kSplits / 10),
                                   (kSplits * 4) / 5 + rng() % (kSplits / 10)};
  std::vector<int> seen(kSplits, 0);
  uint64_t total_seen = 0;
  std::vector<uint64_t> sequences(kWorkers, 0);
  std::vector<bool> finished(kWorkers, false);
  size_t open = kWorkers;
  int restarts = 0;
  int answered_before_crash = 0;
  int retried_fresh = 0;
  auto record = [&](const SplitView& view, size_t worker) {
    for (uint64_t index : view.indices) {
      ASSERT_LT(index, kSplits);
      ++seen[index];
      ++total_seen;
    }
    if (view.end_of_splits && !finished[worker]) {
      finished[worker] = true;
      --open;
    }
  };

  while (open > 0) {
    std::vector<Request> batch;
    kj::Vector<kj::Promise<std::optional<SplitView>>> replies;
    for (size_t w = 0; w < kWorkers; ++w) {
      if (finished[w]) continue;
      Request request{w, ++sequences[w], static_cast<uint32_t>(1 + rng() % 300)};
      batch.push_back(request);
      replies.add(client->GetSplitAsync(tasks[w], 0, request.sequence, request.batch)
                      .then([](SplitView v) { return std::optional<SplitView>(std::move(v)); },
                            [](kj::Exception&&) { return std::optional<SplitView>(); }));
    }
    const bool crash = restarts < 3 && total_seen >= kill_at[restarts];
    // The second crash comes after the answers arrived (a retry after a lost
    // reply); the others while the requests are on the wire (or not yet).
    const bool crash_after_answers = crash && restarts == 1;
    if (crash && !crash_after_answers) {
      loop.wait_scope().poll();
      dispatcher->process().Signal(SIGKILL);
    }
    auto answers = loop.Wait(kj::joinPromises(replies.releaseAsArray()));
    if (crash_after_answers) dispatcher->process().Signal(SIGKILL);
    if (!crash) {
      for (size_t i = 0; i < answers.size(); ++i) {
        ASSERT_TRUE(answers[i].has_value()) << "getSplit failed without a crash";
        record(*answers[i], batch[i].worker);
      }
      continue;
    }
    ASSERT_TRUE(dispatcher->process().Wait(std::chrono::seconds(30)).has_value());
    client.reset();
    dispatcher.reset();
    dispatcher =
        std::make_unique<DispatcherProcess>(DispatcherProcess::Options{.work_dir = work_dir});
    client = std::make_unique<DsClient>(loop, dispatcher->address());
    ++restarts;
    // Retry every in-flight request with its sequence number.
    for (size_t i = 0; i < batch.size(); ++i) {
      auto retry = client->GetSplit(tasks[batch[i].worker], 0, batch[i].sequence, batch[i].batch);
      ASSERT_TRUE(retry.ok()) << retry.status().ToString();
      ++(answers[i].has_value() ? answered_before_crash : retried_fresh);
      if (answers[i].has_value()) {
        EXPECT_EQ(retry->indices, answers[i]->indices)
            << "a retry must get the answer already given";
        EXPECT_EQ(retry->end_of_splits, answers[i]->end_of_splits);
      }
      record(*retry, batch[i].worker);
    }
  }
  EXPECT_EQ(restarts, 3);
  EXPECT_GT(answered_before_crash, 0);
  std::printf("in-flight requests at the crashes: %d answered before, %d only by their retry\n",
              answered_before_crash, retried_fresh);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(kSplits))
      << "missing " << std::count(seen.begin(), seen.end(), 0) << ", twice or more "
      << std::count_if(seen.begin(), seen.end(), [](int n) { return n > 1; });
  // The next repetition starts afresh after all that.
  auto next = client->GetSplit(tasks[0], 1, ++sequences[0], 5);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->indices, (std::vector<uint64_t>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace dispatch::testing
