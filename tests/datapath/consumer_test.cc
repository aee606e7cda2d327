// Consumers: a reader follows workers that join mid-read, opens its job on
// the next connection when the first drops before the job is open, releases
// its job client when closed, and one that vanishes (kill -9) is timed out by
// the dispatcher and its job garbage-collected.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <future>
#include <set>

#include "tests/datapath/datapath_support.h"
#include "tests/support/stalling_relay.h"

namespace dispatch::testing {
namespace {

// `dispatchctl --json ARGS...` until its output contains `needle` or the
// deadline passes.
bool WaitForDispatchctl(const std::string& dispatcher, const std::vector<std::string>& args,
                        const std::string& needle, std::string* last_output) {
  std::vector<std::string> argv = {"--dispatcher=" + dispatcher, "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  return WaitUntil([&] {
    *last_output = RunDispatchctl(argv).output;
    return last_output->find(needle) != std::string::npos;
  });
}

TEST(Consumer, OpenRefusesBadOptionsWithClearErrors) {
  clients::ReaderOptions options;
  options.dispatcher_address = "nonsense";
  options.dataset.definition = "range count=1\n";
  auto bad_address = clients::DatasetReader::Open(options);
  ASSERT_FALSE(bad_address.ok());
  EXPECT_NE(bad_address.status().message().find("dispatcher address"), std::string::npos)
      << bad_address.status().ToString();

  options.dispatcher_address = "tcp:127.0.0.1:1";
  options.job.num_consumers = 2;
  options.consumer_index = 2;
  auto bad_index = clients::DatasetReader::Open(options);
  ASSERT_FALSE(bad_index.ok());
  EXPECT_NE(bad_index.status().message().find("consumer index in [0, 2), got 2"), std::string::npos)
      << bad_index.status().ToString();

  options.job.num_consumers = 0;
  options.consumer_index = -1;
  options.dataset.definition.clear();
  auto no_dataset = clients::DatasetReader::Open(options);
  ASSERT_FALSE(no_dataset.ok());
  EXPECT_NE(no_dataset.status().message().find("no dataset"), std::string::npos);
}

TEST(Consumer, FollowsAWorkerThatJoinsMidRead) {
  // Long enough that the first worker cannot finish every split before the
  // second one has started and registered (30,000 elements were, once the
  // reader got faster, about one run in four on a loaded machine).
  constexpr uint64_t kCount = 300000;
  DataCluster cluster;
  cluster.StartWorker(0);
  auto options = cluster.ReaderOf("range count=300000 splits=300", rpc::ProcessingMode::DYNAMIC);
  options.max_buffered_elements = 128;
  options.max_elements_per_call = 32;
  BackgroundRead read(options);
  ASSERT_TRUE(read.WaitForCount(1000));
  cluster.StartWorker(1);
  Status status = read.Join();
  ASSERT_TRUE(status.ok()) << status.ToString();
  std::set<uint64_t> tasks;
  for (const auto& e : read.elements()) tasks.insert(e.task_id);
  EXPECT_EQ(tasks.size(), 2u) << "the reader never read the new worker's task";
  auto values = Values(read.elements());
  ASSERT_EQ(values.size(), kCount);
  for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(values[i], i);
}

TEST(Consumer, OpenGoesOnOnTheNextConnectionWhenTheFirstDropsBeforeTheJobIsOpen) {
  // As in a dispatcher restart or an HA takeover: the connection is up, the
  // dataset's registration is sent, and the connection drops unanswered.
  constexpr uint64_t kCount = 1237;  // its definition is the relay's needle
  DataCluster cluster;
  cluster.StartWorker(0);
  StallingRelay relay(cluster.dispatcher());
  relay.StallFirstToSend("count=1237");
  auto options = cluster.ReaderOf("range count=1237 splits=3", rpc::ProcessingMode::OFF);
  options.dispatcher_address = "tcp:127.0.0.1:" + std::to_string(relay.port());
  auto opening = std::async(std::launch::async, [&options] {
    return clients::DatasetReader::Open(options, std::chrono::seconds(30));
  });
  ASSERT_TRUE(WaitUntil([&] { return relay.stalled() == 1; })) << relay.failure();
  ASSERT_EQ(relay.CutStalled(), 1u);
  auto reader = opening.get();
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::vector<clients::Element> elements;
  clients::Element element;
  while (true) {
    Result<bool> next = (*reader)->Next(&element, kTestDeadline);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!*next) break;
    elements.push_back(element);
  }
  auto values = Values(elements);
  ASSERT_EQ(values.size(), kCount);
  for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(values[i], i);
  EXPECT_EQ(relay.failure(), "");
}

TEST(Consumer, ReadsLargeElementsIntact) {
  // Elements of 4 KiB and more go out by reference to the worker's buffer,
  // one message segment each (10 KiB ones: about 100 per reply): every byte
  // must still arrive, once, in order.
  for (const uint64_t size : {10240, 300000}) {
    SCOPED_TRACE("elements of " + std::to_string(size) + " bytes");
    const uint64_t count = size < 100000 ? 400 : 40;
    DataCluster cluster;
    cluster.StartWorker(0);
    auto options = cluster.ReaderOf("synthetic size=" + std::to_string(size) +
                                        " count=" + std::to_string(count) + " splits=4",
                                    rpc::ProcessingMode::OFF);
    options.max_bytes_per_call = 1 << 20;  // several replies
    BackgroundRead read(options);
    Status status = read.Join();
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_EQ(read.elements().size(), count);
    for (uint64_t i = 0; i < count; ++i) {
      const std::string& data = read.elements()[i].data;
      ASSERT_EQ(data.size(), size);
      uint64_t index = 0;
      std::memcpy(&index, data.data(), sizeof(index));
      EXPECT_EQ(index, i);
      EXPECT_EQ(data.find_first_not_of('x', sizeof(index)), std::string::npos) << "element " << i;
    }
  }
}

TEST(Consumer, NextCopiesSmallElementsIntoTheCallersBuffer) {
  // Small elements are read where the reply put them and copied into the
  // Element the caller passes: its buffer is reused, nothing is allocated
  // per element (before, each Next() handed over a new string).
  constexpr uint64_t kCount = 3000;
  DataCluster cluster;
  cluster.StartWorker(0);
  auto options =
      cluster.ReaderOf("synthetic size=100 count=3000 splits=3", rpc::ProcessingMode::OFF);
  options.max_elements_per_call = 256;  // several replies
  auto reader = clients::DatasetReader::Open(options);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  clients::Element element;
  const char* buffer = nullptr;
  for (uint64_t i = 0; i < kCount; ++i) {
    auto next = (*reader)->Next(&element, kTestDeadline);
    ASSERT_TRUE(next.ok() && *next) << "element " << i << ": " << next.status().ToString();
    ASSERT_EQ(element.data.size(), 100u);
    uint64_t index = 0;
    std::memcpy(&index, element.data.data(), sizeof(index));
    ASSERT_EQ(index, i);
    ASSERT_EQ(element.data.find_first_not_of('x', sizeof(index)), std::string::npos);
    if (i == 0) buffer = element.data.data();
    ASSERT_EQ(element.data.data(), buffer) << "element " << i << " came in a new buffer";
  }
  auto end = (*reader)->Next(&element, kTestDeadline);
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_FALSE(*end);
  EXPECT_EQ((*reader)->stats().elements, kCount);
}

TEST(Consumer, ReadsToTheEndWithAReadAheadSmallerThanAReply) {
  // The read-ahead counts whole replies, the one being read included: a
  // limit below one reply's size still wakes the loop when a reply is read.
  DataCluster cluster;
  cluster.StartWorker(0);
  auto options = cluster.ReaderOf("range count=2000 splits=2", rpc::ProcessingMode::OFF);
  options.max_buffered_elements = 1;
  options.max_elements_per_call = 300;
  BackgroundRead read(options);
  Status status = read.Join();
  ASSERT_TRUE(status.ok()) << status.ToString();
  auto values = Values(read.elements());
  ASSERT_EQ(values.size(), 2000u);
  for (uint64_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], i);
}

TEST(Consumer, ClosingAReaderReleasesItsJobClient) {
  DataCluster cluster;
  cluster.StartWorker(0);
  auto options =
      cluster.ReaderOf("range count=100000000 splits=100", rpc::ProcessingMode::DYNAMIC);
  auto reader = clients::DatasetReader::Open(options);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  clients::Element element;
  for (int i = 0; i < 10; ++i) {
    auto next = (*reader)->Next(&element, kTestDeadline);
    ASSERT_TRUE(next.ok() && *next) << next.status().ToString();
  }
  const uint64_t client_id = (*reader)->stats().job_client_id;
  ASSERT_NE(client_id, 0u);
  (*reader)->Close();
  // Released at once: the listing has no job client left.
  CommandResult clients = RunDispatchctl({"--dispatcher=" + cluster.dispatcher(), "clients"});
  ASSERT_EQ(clients.exit_code, 0) << clients.output;
  EXPECT_EQ(clients.output.find(" " + std::to_string(client_id) + " "), std::string::npos)
      << clients.output;
}

TEST(Consumer, OneThatVanishesIsTimedOutAndItsJobGarbageCollected) {
  DataCluster cluster(
      {"--client-timeout-ms=1000", "--job-gc-check-interval-ms=100", "--job-gc-timeout-ms=300"});
  cluster.StartWorker(0);
  Subprocess consumer({DispatchctlBinary(), "--dispatcher=" + cluster.dispatcher(),
                       "--heartbeat-ms=100", "read", "--job-name=vanishing", "range",
                       "count=1000000000", "splits=1000"});
  auto line = consumer.ReadLine(kTestDeadline);
  ASSERT_TRUE(line.has_value());
  unsigned long long job_id = 0, client_id = 0;
  ASSERT_EQ(sscanf(line->c_str(), "reading job %llu as job client %llu", &job_id, &client_id), 2)
      << *line;
  std::string output;
  ASSERT_TRUE(WaitForDispatchctl(cluster.dispatcher(), {"job", std::to_string(job_id)},
                                 "\"numClients\": 1", &output))
      << output;
  consumer.Signal(SIGKILL);
  consumer.Wait(kTestDeadline);
  EXPECT_TRUE(WaitForDispatchctl(cluster.dispatcher(), {"job", std::to_string(job_id)},
                                 "\"garbageCollected\": true", &output))
      << "the job was not garbage-collected after its consumer vanished:\n"
      << output;
  EXPECT_EQ(output.find("\"jobClientId\": \"" + std::to_string(client_id)), std::string::npos)
      << "the vanished consumer's job client was not timed out:\n"
      << output;
}

}  // namespace
}  // namespace dispatch::testing
