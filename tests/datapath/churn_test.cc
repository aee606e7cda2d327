// Workers replaced at new addresses (issue 50, step 1): three dispatch-worker
// processes serve a `range` read; one is killed -9 for good and a new worker
// joins at a fresh port, as a rescheduled pod would. The dead worker's
// address never sees a worker again, so its task is handed over once
// --worker-grace-ms has passed: the read ends. DYNAMIC with requeue reads
// every element at least once (a split the dead worker had partly served is
// read again whole elsewhere: duplicates are counted, not refused, until
// exactly-once delivery lands); DYNAMIC without requeue and OFF end too.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "tests/datapath/datapath_support.h"

namespace dispatch::testing {
namespace {

constexpr uint64_t kCount = 20000, kSplits = 200;

struct ChurnRead {
  Status status;
  std::map<uint64_t, uint64_t> times;  // value -> times read
  uint64_t elements = 0;
};

// Reads `range count=kCount splits=kSplits` with `mode` from three workers,
// killing worker 0 for good a fifth of the way in and starting worker 3 at a
// new port in its stead.
ChurnRead ReadThroughAReplacement(rpc::ProcessingMode mode, bool requeue) {
  DataCluster cluster({"--worker-grace-ms=300"});
  const std::vector<std::string> flags = {"--split-batch=2"};
  for (size_t i = 0; i < 3; ++i) cluster.StartWorker(i, flags);
  auto options = cluster.ReaderOf(
      "range count=" + std::to_string(kCount) + " splits=" + std::to_string(kSplits), mode);
  options.job.requeue_unfinished_splits = requeue;
  // A small read-ahead keeps the workers paced by the consumer, so the kill
  // lands while the victim holds unfinished work.
  options.max_buffered_elements = 256;
  options.max_elements_per_call = 64;
  BackgroundRead read(options);
  EXPECT_TRUE(read.WaitForCount(kCount / 5)) << "the read never got that far";
  cluster.Kill9Worker(0);
  cluster.StartWorker(3, flags);  // a new worker, at a new port
  ChurnRead out;
  out.status = read.Join();
  for (uint64_t value : Values(read.elements())) ++out.times[value];
  out.elements = read.elements().size();
  return out;
}

uint64_t Missing(const ChurnRead& read, uint64_t at_least) {
  uint64_t missing = 0;
  for (uint64_t v = 0; v < kCount; ++v) {
    auto it = read.times.find(v);
    if (it == read.times.end() || it->second < at_least) ++missing;
  }
  return missing;
}

uint64_t Repeated(const ChurnRead& read) {
  uint64_t repeated = 0;
  for (const auto& [value, times] : read.times) repeated += times - 1;
  return repeated;
}

TEST(WorkerChurn, DynamicWithRequeueEndsAndReadsEveryElementThroughAReplacementElsewhere) {
  ChurnRead read = ReadThroughAReplacement(rpc::ProcessingMode::DYNAMIC, /*requeue=*/true);
  ASSERT_TRUE(read.status.ok()) << "the read did not end: " << read.status.ToString();
  EXPECT_EQ(Missing(read, 1), 0u) << "requeueing lost elements of the dead worker";
  std::printf("%llu elements read, %llu of them again (re-read requeued splits)\n",
              static_cast<unsigned long long>(read.elements),
              static_cast<unsigned long long>(Repeated(read)));
}

TEST(WorkerChurn, DynamicWithoutRequeueEndsLosingAtMostTheDeadWorkersSplits) {
  ChurnRead read = ReadThroughAReplacement(rpc::ProcessingMode::DYNAMIC, /*requeue=*/false);
  ASSERT_TRUE(read.status.ok()) << "the read did not end: " << read.status.ToString();
  EXPECT_EQ(Repeated(read), 0u) << "at-most-once read an element twice";
  std::printf("%llu elements lost with the dead worker (at-most-once)\n",
              static_cast<unsigned long long>(Missing(read, 1)));
}

TEST(WorkerChurn, OffEndsWithEverySurvivingWorkersStreamComplete) {
  ChurnRead read = ReadThroughAReplacement(rpc::ProcessingMode::OFF, /*requeue=*/false);
  ASSERT_TRUE(read.status.ok()) << "the read did not end: " << read.status.ToString();
  // Workers 1 and 2 read the whole range each; the dead one's stream ended
  // where it stopped, and the newcomer's (if it joined in time) is whole too.
  EXPECT_EQ(Missing(read, 2), 0u) << "a surviving worker's stream is incomplete";
  std::printf("%llu elements read by the surviving, dead and new workers' tasks\n",
              static_cast<unsigned long long>(read.elements));
}

}  // namespace
}  // namespace dispatch::testing
