// OFF, static sharding and round robin end to end, plus `dispatchctl read`:
// real dispatcher and dispatch-worker processes producing `range`.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tests/datapath/datapath_support.h"

namespace dispatch::testing {
namespace {

// Each task's values, in the order the consumer read them.
std::map<uint64_t, std::vector<uint64_t>> ByTask(const std::vector<clients::Element>& elements) {
  std::map<uint64_t, std::vector<uint64_t>> out;
  for (const auto& e : elements) out[e.task_id].push_back(std::stoull(e.data));
  return out;
}

TEST(ProcessingModeOff, EveryConsumerSeesEveryWorkersFullSequence) {
  constexpr uint64_t kCount = 3000;
  DataCluster cluster;
  cluster.StartWorker(0);
  cluster.StartWorker(1);
  // Two consumers, each with a job of its own (anonymous jobs).
  auto options = cluster.ReaderOf("range count=3000 splits=7", rpc::ProcessingMode::OFF);
  BackgroundRead a(options);
  options.seed += 1;
  BackgroundRead b(options);
  for (BackgroundRead* read : {&a, &b}) {
    Status status = read->Join();
    ASSERT_TRUE(status.ok()) << status.ToString();
    auto by_task = ByTask(read->elements());
    ASSERT_EQ(by_task.size(), 2u) << "one task per worker";
    for (const auto& [task, values] : by_task) {
      ASSERT_EQ(values.size(), kCount) << "task " << task;
      for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(values[i], i) << "task " << task;
    }
  }
}

TEST(StaticSharding, WorkerIOfNReadsItsShardOnly) {
  constexpr uint64_t kCount = 3000, kSplits = 12, kWorkers = 3;
  // The dispatcher is told the addresses before any worker listens there:
  // Unix sockets, since a TCP port known in advance could be taken meanwhile.
  TempDir dir;
  std::vector<std::string> addresses;
  std::string list;
  for (uint64_t i = 0; i < kWorkers; ++i) {
    addresses.push_back("unix:" + dir.File("worker-" + std::to_string(i) + ".sock"));
    list += (i == 0 ? "" : ",") + addresses.back();
  }
  DataCluster cluster({"--worker-addresses=" + list});
  for (uint64_t i = 0; i < kWorkers; ++i) cluster.StartWorker(i, {}, addresses[i]);
  auto options = cluster.ReaderOf("range count=3000 splits=12", rpc::ProcessingMode::FILE);
  BackgroundRead read(options);
  Status status = read.Join();
  ASSERT_TRUE(status.ok()) << status.ToString();
  auto by_task = ByTask(read.elements());
  ASSERT_EQ(by_task.size(), kWorkers);
  std::set<uint64_t> shards;
  for (const auto& [task, values] : by_task) {
    ASSERT_FALSE(values.empty());
    // Every split of a task lies in one shard: split index mod the number of workers.
    const uint64_t shard = SplitOf(values.front(), kCount, kSplits) % kWorkers;
    for (uint64_t v : values) {
      ASSERT_EQ(SplitOf(v, kCount, kSplits) % kWorkers, shard)
          << "task " << task << " read " << v << " outside its shard " << shard;
    }
    shards.insert(shard);
  }
  EXPECT_EQ(shards.size(), kWorkers) << "two workers read the same shard";
  auto values = Values(read.elements());
  ASSERT_EQ(values.size(), kCount);
  for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(values[i], i);
}

TEST(RoundRobin, ConsumersGetElementsInRoundOrder) {
  constexpr int64_t kRounds = 300;
  DataCluster cluster;
  cluster.StartWorker(0);
  cluster.StartWorker(1);
  auto options = cluster.ReaderOf("range count=1000000 splits=1", rpc::ProcessingMode::OFF);
  options.job.job_name = "round-robin";
  options.job.num_consumers = 2;
  std::vector<std::vector<clients::Element>> read(2);
  std::vector<std::unique_ptr<clients::DatasetReader>> readers;
  for (int64_t c = 0; c < 2; ++c) {
    options.consumer_index = c;
    options.seed += 1;
    auto reader = clients::DatasetReader::Open(options);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    readers.push_back(std::move(reader).value());
  }
  // Consumers move in lock step (a round is built for both), so read them in turns.
  for (int64_t round = 0; round < kRounds; ++round) {
    for (int64_t c = 0; c < 2; ++c) {
      clients::Element element;
      Result<bool> next = readers[c]->Next(&element, kTestDeadline);
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      ASSERT_TRUE(*next) << "end of sequence at round " << round;
      read[c].push_back(std::move(element));
    }
  }
  for (auto& reader : readers) reader->Close();
  for (int64_t j = 0; j < kRounds; ++j) {
    for (int64_t c = 0; c < 2; ++c) {
      const clients::Element& e = read[c][j];
      ASSERT_EQ(e.round, j) << "consumer " << c;
      // Round j is served by one task; its k-th round hands consumer c its
      // element 2k + c, and each worker's range starts at 0.
      ASSERT_EQ(std::stoull(e.data), static_cast<uint64_t>(2 * (j / 2) + c))
          << "consumer " << c << " round " << j;
    }
    ASSERT_EQ(read[0][j].task_id, read[1][j].task_id) << "round " << j << " came from two tasks";
    if (j > 0) {
      ASSERT_NE(read[0][j].task_id, read[0][j - 1].task_id) << "rounds alternate between tasks";
    }
  }
}

TEST(RoundRobin, AWorkerThatJoinsStartsAtARoundEveryConsumerAgreedOn) {
  DataCluster cluster;
  cluster.StartWorker(0);
  auto options = cluster.ReaderOf("range count=100000000 splits=1", rpc::ProcessingMode::OFF);
  options.job.job_name = "round-robin-join";
  options.job.num_consumers = 2;
  options.max_buffered_elements = 16;  // consumers stay close to the rounds they report
  std::vector<std::unique_ptr<clients::DatasetReader>> readers;
  for (int64_t c = 0; c < 2; ++c) {
    options.consumer_index = c;
    options.seed += 1;
    auto reader = clients::DatasetReader::Open(options);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    readers.push_back(std::move(reader).value());
  }
  std::vector<std::vector<clients::Element>> read(2);
  auto read_round = [&]() {
    for (int64_t c = 0; c < 2; ++c) {
      clients::Element element;
      Result<bool> next = readers[c]->Next(&element, kTestDeadline);
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      ASSERT_TRUE(*next);
      read[c].push_back(std::move(element));
    }
  };
  for (int i = 0; i < 50; ++i) read_round();
  cluster.StartWorker(1);
  // Read until the new worker's task has served a round (or the deadline).
  const uint64_t first_task = read[0].front().task_id;
  WaitUntil([&] {
    read_round();
    return read[0].back().task_id != first_task || ::testing::Test::HasFatalFailure();
  });
  if (::testing::Test::HasFatalFailure()) return;
  for (int i = 0; i < 20; ++i) read_round();
  for (auto& reader : readers) reader->Close();
  ASSERT_NE(read[0].back().task_id, first_task) << "the new worker never served a round";
  for (size_t j = 0; j < read[0].size(); ++j) {
    ASSERT_EQ(read[0][j].round, static_cast<int64_t>(j));
    ASSERT_EQ(read[1][j].round, static_cast<int64_t>(j));
    ASSERT_EQ(read[0][j].task_id, read[1][j].task_id) << "round " << j << " came from two tasks";
  }
}

TEST(DispatchctlRead, PrintsCountBytesAndThroughputAndRefusesBadDatasets) {
  DataCluster cluster;
  cluster.StartWorker(0);
  cluster.StartWorker(1);
  auto ok = RunDispatchctl(
      {"--dispatcher=" + cluster.dispatcher(), "read", "range", "count=5000", "splits=5"});
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("read 5000 elements, 18890 bytes"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("elements/s"), std::string::npos) << ok.output;
  EXPECT_EQ(ok.output.find('\r'), std::string::npos) << "a progress bar without a terminal";

  auto bad_kind = RunDispatchctl({"--dispatcher=" + cluster.dispatcher(), "read", "nosuch"});
  EXPECT_EQ(bad_kind.exit_code, 2);
  EXPECT_NE(bad_kind.output.find("unknown dataset kind 'nosuch'"), std::string::npos)
      << bad_kind.output;
  auto bad_arg =
      RunDispatchctl({"--dispatcher=" + cluster.dispatcher(), "read", "range", "count=-3"});
  EXPECT_EQ(bad_arg.exit_code, 2);
  EXPECT_NE(bad_arg.output.find("count must be an integer"), std::string::npos) << bad_arg.output;
  auto missing = RunDispatchctl(
      {"--dispatcher=" + cluster.dispatcher(), "read", "lines", "/nonexistent/file"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("cannot open /nonexistent/file"), std::string::npos)
      << missing.output;
}

TEST(DispatchctlRun, PriorityTimeoutAndCancelFlags) {
  DataCluster cluster;
  cluster.StartWorker(0);
  const std::string dispatcher = "--dispatcher=" + cluster.dispatcher();
  auto prioritized = RunDispatchctl({dispatcher, "run", "--priority=-7", "echo", "low"});
  ASSERT_EQ(prioritized.exit_code, 0) << prioritized.output;
  EXPECT_NE(prioritized.output.find("echo(low) -> low"), std::string::npos) << prioritized.output;
  auto bad = RunDispatchctl({dispatcher, "run", "--priority=high", "echo"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--priority=high is not an integer"), std::string::npos)
      << bad.output;
  auto timed = RunDispatchctl({dispatcher, "run", "--closure-timeout-ms=200", "sleep", "600000"});
  EXPECT_EQ(timed.exit_code, 1) << timed.output;
  EXPECT_NE(timed.output.find("DeadlineExceeded"), std::string::npos) << timed.output;
  EXPECT_NE(timed.output.find("deadline exceeded: its timeout of 200 ms"), std::string::npos)
      << timed.output;
  auto cancelled =
      RunDispatchctl({dispatcher, "run", "--count=2", "--cancel-after-ms=300", "sleep", "600000"});
  EXPECT_EQ(cancelled.exit_code, 0) << cancelled.output;
  EXPECT_NE(cancelled.output.find("0 failed, 2 cancelled"), std::string::npos)
      << cancelled.output;
}

TEST(DispatchctlRun, SchedulesClosuresAndPrintsEachResult) {
  DataCluster cluster;
  cluster.StartWorker(0);
  auto ran = RunDispatchctl(
      {"--dispatcher=" + cluster.dispatcher(), "run", "--count=3", "echo", "hi there"});
  ASSERT_EQ(ran.exit_code, 0) << ran.output;
  EXPECT_NE(ran.output.find("echo(hi there) -> hi there"), std::string::npos) << ran.output;
  EXPECT_NE(ran.output.find("ran 3 closures of echo: 3 finished, 0 failed"), std::string::npos)
      << ran.output;
  auto usage = RunDispatchctl({"--dispatcher=" + cluster.dispatcher(), "run"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.output.find("'run' takes a closure function"), std::string::npos) << usage.output;
}

}  // namespace
}  // namespace dispatch::testing
