// DYNAMIC sharding end to end: real dispatcher, real dispatch-worker
// processes producing `range`, two consumers sharing one named job. Every
// element once; with a worker killed -9 midway, by default nothing repeats
// (its unfinished splits are lost, the reference's at-most-once), and with
// requeueing nothing is lost (only the requeued splits may repeat).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "clients/dataset_definition.h"
#include "tests/datapath/datapath_support.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

constexpr uint64_t kSplitBatch = 2;

// Elements grouped by split, with how often each value was read.
struct Tally {
  std::map<uint64_t, uint64_t> times;  // value -> times read
  std::set<uint64_t> missing_splits;
  std::set<uint64_t> repeated_splits;
};

Tally Count(const std::vector<uint64_t>& values, uint64_t count, uint64_t splits) {
  Tally t;
  for (uint64_t v : values) ++t.times[v];
  for (uint64_t v = 0; v < count; ++v) {
    auto it = t.times.find(v);
    if (it == t.times.end())
      t.missing_splits.insert(SplitOf(v, count, splits));
    else if (it->second > 1)
      t.repeated_splits.insert(SplitOf(v, count, splits));
  }
  return t;
}

// Four workers for a read that kills worker 0 and brings it back at its
// address (ReadWithTwoConsumers), which is therefore a Unix socket.
void StartFourWorkersOneRestartable(DataCluster& cluster, const std::string& flag) {
  cluster.StartWorker(0, {flag}, cluster.SocketAddress(0));
  for (size_t i = 1; i < 4; ++i) cluster.StartWorker(i, {flag});
}

std::vector<uint64_t> ReadWithTwoConsumers(DataCluster& cluster, const std::string& definition,
                                           bool requeue, int kill_worker_after) {
  auto options = cluster.ReaderOf(definition, rpc::ProcessingMode::DYNAMIC);
  options.job.job_name = "shared";
  options.job.requeue_unfinished_splits = requeue;
  // A small read-ahead keeps the workers paced by the consumers, so a kill
  // lands while the victim holds unfinished splits.
  options.max_buffered_elements = 256;
  options.max_elements_per_call = 64;
  BackgroundRead a(options);
  options.seed += 1;
  BackgroundRead b(options);
  if (kill_worker_after >= 0) {
    EXPECT_TRUE(a.WaitForCount(kill_worker_after)) << "the read never got that far";
    cluster.Kill9Worker(0);
    // The orchestrator brings the worker back at its address within the
    // grace period (--worker-grace-ms): it takes over its task and carries
    // on with fresh splits (tests/datapath/churn_test.cc: a worker that comes
    // back elsewhere instead).
    cluster.StartWorker(0);
  }
  Status sa = a.Join();
  Status sb = b.Join();
  EXPECT_TRUE(sa.ok()) << sa.ToString();
  EXPECT_TRUE(sb.ok()) << sb.ToString();
  std::vector<uint64_t> all = Values(a.elements());
  std::vector<uint64_t> more = Values(b.elements());
  all.insert(all.end(), more.begin(), more.end());
  std::sort(all.begin(), all.end());
  EXPECT_GT(a.elements().size(), 0u) << "consumer a read nothing";
  EXPECT_GT(b.elements().size(), 0u) << "consumer b read nothing";
  return all;
}

TEST(DynamicSharding, FourWorkersAndTwoConsumersReadEveryElementExactlyOnce) {
  constexpr uint64_t kCount = 20000, kSplits = 40;
  DataCluster cluster;
  for (size_t i = 0; i < 4; ++i) cluster.StartWorker(i);
  auto values = ReadWithTwoConsumers(
      cluster, "range count=" + std::to_string(kCount) + " splits=" + std::to_string(kSplits),
      false, -1);
  ASSERT_EQ(values.size(), kCount);
  for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(values[i], i) << "read twice or lost";
}

TEST(DynamicSharding, AWorkerKilledMidwayLosesItsUnfinishedSplitsAndDuplicatesNothing) {
  constexpr uint64_t kCount = 40000, kSplits = 200;
  DataCluster cluster;
  StartFourWorkersOneRestartable(cluster, "--split-batch=" + std::to_string(kSplitBatch));
  auto values = ReadWithTwoConsumers(
      cluster, "range count=" + std::to_string(kCount) + " splits=" + std::to_string(kSplits),
      false, kCount / 5);
  Tally tally = Count(values, kCount, kSplits);
  EXPECT_TRUE(tally.repeated_splits.empty())
      << "at-most-once repeated elements of split " << *tally.repeated_splits.begin();
  // What is lost is what the dead worker held: at most one batch of splits.
  EXPECT_LE(tally.missing_splits.size(), kSplitBatch);
  std::printf("lost %zu splits with the killed worker\n", tally.missing_splits.size());
}

TEST(DynamicSharding, WithRequeueingAWorkerKilledMidwayLosesNothing) {
  constexpr uint64_t kCount = 40000, kSplits = 200;
  DataCluster cluster;
  StartFourWorkersOneRestartable(cluster, "--split-batch=" + std::to_string(kSplitBatch));
  auto values = ReadWithTwoConsumers(
      cluster, "range count=" + std::to_string(kCount) + " splits=" + std::to_string(kSplits), true,
      kCount / 5);
  Tally tally = Count(values, kCount, kSplits);
  EXPECT_TRUE(tally.missing_splits.empty())
      << "requeueing lost elements of split " << *tally.missing_splits.begin();
  // Only the dead worker's unfinished (requeued) splits may repeat.
  EXPECT_LE(tally.repeated_splits.size(), kSplitBatch);
  std::printf("%zu splits were requeued and partly read twice\n", tally.repeated_splits.size());
}

TEST(DynamicSharding, LinesDatasetsReadEveryLineOfEveryFileOnce) {
  TempDir dir;
  std::multiset<std::string> expected;
  clients::KindDefinition def;
  def.kind = "lines";
  for (int f = 0; f < 6; ++f) {
    const std::string path = dir.File("part-" + std::to_string(f) + ".txt");
    std::ofstream out(path);
    for (int line = 0; line < 500; ++line) {
      const std::string text = "file " + std::to_string(f) + " line " + std::to_string(line);
      out << text << "\n";
      expected.insert(text);
    }
    def.files.push_back(path);
  }
  DataCluster cluster;
  cluster.StartWorker(0, {"--split-batch=1"});
  cluster.StartWorker(1, {"--split-batch=1"});
  auto options =
      cluster.ReaderOf(clients::FormatKindDefinition(def), rpc::ProcessingMode::DYNAMIC);
  BackgroundRead read(options);
  Status status = read.Join();
  ASSERT_TRUE(status.ok()) << status.ToString();
  std::multiset<std::string> got;
  for (const auto& e : read.elements()) got.insert(e.data);
  EXPECT_EQ(got, expected) << "a line was lost or read twice";
}

}  // namespace
}  // namespace dispatch::testing
