// A consumer whose transfer connection drops and comes back: its consumer id
// and sequence survive the reconnect, so a reply that arrived is acknowledged
// by its next request on the new connection (never served again) and one that
// was lost is repeated; only a consumer that does not come back within the
// worker's --consumer-hold-ms has its reply served to others. Real workers
// (a dispatch-worker process, or a WorkerAssembly behind a relay the test
// cuts) and real readers; every element is counted.
#include <capnp/any.h>
#include <capnp/message.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "clients/builtin_dataset_kinds.h"
#include "clients/worker_assembly.h"
#include "tests/datapath/datapath_support.h"
#include "tests/datapath/transfer_client.h"
#include "tests/integration/client_loop.h"
#include "tests/support/stalling_relay.h"

namespace dispatch::testing {
namespace {

using Elements = std::vector<std::string>;

Elements Get(TransferClient& client, const Ask& ask) {
  std::string error;
  auto reply = client.Get(ask, &error);
  KJ_IF_MAYBE (r, reply) {
    EXPECT_EQ(r->getResult().getStatus(), rpc::ElementStatus::READY);
    return ElementsOf(*r);
  }
  ADD_FAILURE() << "getElements failed: " << error;
  return {};
}

bool Disjoint(const Elements& a, const Elements& b) {
  std::set<std::string> in_a(a.begin(), a.end());
  return std::none_of(b.begin(), b.end(), [&](const std::string& e) { return in_a.contains(e); });
}

// A task that runs for as long as the test needs, on a dispatch-worker that
// keeps two transfer connections: a reader's, which keeps the task, and the
// test's. The reader makes one call at a time and reads ahead one reply: once
// it returned an element it asks for nothing more, so only the test's own
// consumers take elements.
class HeldReply : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> worker_flags = {}) {
    worker_flags.push_back("--max-transfer-connections=2");
    worker_ = cluster_.StartWorker(0, worker_flags);
    auto options = cluster_.ReaderOf("range count=100000000 splits=10", rpc::ProcessingMode::OFF);
    options.calls_per_task = 1;
    options.max_buffered_elements = 1;
    options.max_elements_per_call = 4;
    auto reader = clients::DatasetReader::Open(options);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    reader_ = std::move(reader).value();
    clients::Element element;
    ASSERT_TRUE(reader_->Next(&element, kTestDeadline).ok());
    task_ = element.task_id;
  }

  void TearDown() override {
    if (reader_ != nullptr) reader_->Close();
  }

  // Consumer 7's first reply, on a connection the test then drops, and the
  // reply to `consumer`'s request `sequence` on a new connection, which is
  // kept for Then(). With the reader's connection and room for one more, the
  // worker keeps a new one only once it has dropped the test's first: by then
  // it has seen that one close.
  std::pair<Elements, Elements> DropThenAsk(uint64_t consumer, uint64_t sequence) {
    Elements first;
    {
      TransferClient dropped(*loop_, worker_);
      first = Get(dropped, Ask{.task = task_, .consumer = 7});
    }
    Elements reply;
    const bool kept = WaitUntil([&] {
      again_ = std::make_unique<TransferClient>(*loop_, worker_);
      std::string error;
      auto answer =
          again_->Get(Ask{.task = task_, .consumer = consumer, .sequence = sequence}, &error);
      KJ_IF_MAYBE (r, answer) {
        reply = ElementsOf(*r);
        return true;
      }
      return false;  // closed at once: the first connection is not gone yet
    });
    EXPECT_TRUE(kept) << "the worker never kept a new connection";
    EXPECT_EQ(first.size(), 4u);
    return {first, reply};
  }
  // `consumer`'s request `sequence` on the new connection.
  Elements Then(uint64_t consumer, uint64_t sequence) {
    return Get(*again_, Ask{.task = task_, .consumer = consumer, .sequence = sequence});
  }

  DataCluster cluster_;
  std::string worker_;
  std::unique_ptr<clients::DatasetReader> reader_;
  uint64_t task_ = 0;
  // The test's side of its connections (held by pointer: its destructor may throw).
  std::unique_ptr<ClientLoop> loop_ = std::make_unique<ClientLoop>();
  std::unique_ptr<TransferClient> again_;  // the connection after the dropped one
};

TEST_F(HeldReply, AReplyThatArrivedIsAcknowledgedByTheNextSequenceOnANewConnection) {
  ASSERT_NO_FATAL_FAILURE(Start());
  // Its connection dropped before the request that acknowledges it.
  const auto [arrived, next] = DropThenAsk(7, /*sequence=*/2);
  const Elements other = Then(8, 1);
  ASSERT_EQ(next.size(), 4u);
  ASSERT_EQ(other.size(), 4u);
  EXPECT_TRUE(Disjoint(arrived, next)) << "consumer 7 got its arrived reply again";
  EXPECT_TRUE(Disjoint(arrived, other)) << "consumer 8 got consumer 7's arrived reply";
  EXPECT_TRUE(Disjoint(next, other));
}

TEST_F(HeldReply, AReplyLostWithItsConnectionIsRepeatedOnTheNext) {
  ASSERT_NO_FATAL_FAILURE(Start());
  // As if the reply had not arrived: sequence 1 is asked again.
  const auto [lost, again] = DropThenAsk(7, /*sequence=*/1);
  EXPECT_EQ(again, lost);
  const Elements other = Then(8, 1);
  const Elements next = Then(7, 2);
  EXPECT_TRUE(Disjoint(lost, other)) << "consumer 8 got consumer 7's reply";
  EXPECT_TRUE(Disjoint(lost, next)) << "consumer 7 got its reply twice";
  EXPECT_TRUE(Disjoint(other, next));
}

TEST_F(HeldReply, AConsumerThatNeverComesBackHasItsReplyServedToOthers) {
  ASSERT_NO_FATAL_FAILURE(Start({"--consumer-hold-ms=200"}));
  // Consumer 7 is never heard from again; consumer 8 reads on, and once the
  // hold is over, consumer 7's elements come to it.
  auto [abandoned, other] = DropThenAsk(8, 1);
  const std::set<std::string> wanted(abandoned.begin(), abandoned.end());
  uint64_t sequence = 1;
  auto all_arrived = [&] {
    const std::set<std::string> seen(other.begin(), other.end());
    return std::includes(seen.begin(), seen.end(), wanted.begin(), wanted.end());
  };
  EXPECT_TRUE(WaitUntil([&] {
    if (all_arrived()) return true;
    const Elements more = Then(8, ++sequence);
    other.insert(other.end(), more.begin(), more.end());
    return all_arrived();
  })) << "consumer 7's elements never reached consumer 8";
  const std::set<std::string> distinct(other.begin(), other.end());
  EXPECT_EQ(distinct.size(), other.size()) << "consumer 8 got an element twice";
}

// A worker in this process whose transfer address, the one consumers are
// told, is a relay's: the relay passes their connections on to where the
// worker listens (a Unix socket), and the test can cut them there.
class RelayedWorker {
 public:
  explicit RelayedWorker(const std::string& dispatcher) {
    const std::string listen = "unix:" + dir_.File("transfer.sock");
    relay_ = std::make_unique<StallingRelay>(listen);
    const std::string relayed = "tcp:127.0.0.1:" + std::to_string(relay_->port());
    clients::WorkerAssemblyOptions options;
    options.agent.dispatcher_address = dispatcher;
    options.agent.worker_address = relayed;
    options.agent.transfer_address = relayed;
    options.agent.heartbeat_interval_ms = 100;
    options.agent.seed = TestSeed();
    options.transfer.listen_address = listen;
    clients::DatasetKindRegistry kinds;
    Status registered = clients::RegisterBuiltinDatasetKinds(kinds);
    if (!registered.ok()) throw std::runtime_error(registered.ToString());
    auto assembly = clients::WorkerAssembly::Create(std::move(options), std::move(kinds));
    if (!assembly.ok()) throw std::runtime_error(assembly.status().ToString());
    assembly_ = std::move(assembly).value();
    Status started = assembly_->Start(kTestDeadline);
    if (!started.ok()) throw std::runtime_error(started.ToString());
  }
  ~RelayedWorker() { assembly_->Stop(); }

  StallingRelay& relay() { return *relay_; }

 private:
  TempDir dir_;
  std::unique_ptr<StallingRelay> relay_;
  std::unique_ptr<clients::WorkerAssembly> assembly_;
};

// A reader of `range count=kCount` with a small read-ahead, in replies of
// kPerCall elements.
constexpr uint64_t kCount = 20000;
constexpr size_t kReadAhead = 64;
constexpr uint32_t kPerCall = 16;
constexpr int kCuts = 8;

clients::ReaderOptions CutReaderOf(const DataCluster& cluster) {
  auto options = cluster.ReaderOf("range count=" + std::to_string(kCount) + " splits=4",
                                  rpc::ProcessingMode::OFF);
  options.max_buffered_elements = kReadAhead;
  options.max_elements_per_call = kPerCall;
  return options;
}

void ExpectEveryElementOnce(const std::vector<clients::Element>& elements) {
  const std::vector<uint64_t> values = Values(elements);
  ASSERT_EQ(values.size(), kCount) << "elements missing or repeated";
  for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(values[i], i) << "element " << i;
}

void ReadToTheEnd(clients::DatasetReader& reader, std::vector<clients::Element>* elements) {
  clients::Element element;
  while (true) {
    Result<bool> next = reader.Next(&element, kTestDeadline);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!*next) return;
    elements->push_back(element);
  }
}

TEST(Reconnect, EveryElementArrivesOnceWhenConnectionsAreCutAfterAReplyArrived) {
  DataCluster cluster;
  RelayedWorker worker(cluster.dispatcher());
  // A read-ahead of one element: every reply that arrives fills it, and the
  // lane it came on asks again (acknowledging it) only once Next() has taken
  // every element before it. So whenever Next() has returned, a reply has
  // arrived that the worker has not heard acknowledged.
  auto options = CutReaderOf(cluster);
  options.max_buffered_elements = 1;
  auto reader = clients::DatasetReader::Open(options);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::vector<clients::Element> elements;
  clients::Element element;
  for (int cut = 0; cut < kCuts; ++cut) {
    // More than the replies that can have arrived before the last cut
    // (the one being read, one queued, one per lane): the last came on a
    // new connection.
    for (uint32_t i = 0; i < 4 * kPerCall; ++i) {
      Result<bool> next = (*reader)->Next(&element, kTestDeadline);
      ASSERT_TRUE(next.ok() && *next) << next.status().ToString();
      elements.push_back(element);
    }
    ASSERT_GE(worker.relay().Stall(""), 1u) << "cut " << cut << " " << worker.relay().failure();
    ASSERT_GE(worker.relay().CutStalled(), 1u);
  }
  ReadToTheEnd(**reader, &elements);
  ExpectEveryElementOnce(elements);
  EXPECT_EQ(worker.relay().failure(), "");
}

// Bytes every getElements request of a CutReaderOf reader carries: its
// request's data section past the three words that change (task, consumer,
// sequence: fields 0 to 2, so words 0 to 2), as Cap'n Proto encodes it.
std::string RequestNeedle(const clients::ReaderOptions& options) {
  capnp::MallocMessageBuilder message;
  auto request = message.initRoot<rpc::ElementRequest>();
  request.setConsumerIndex(-1);
  request.setRound(-1);
  request.setMaxElements(options.max_elements_per_call);
  request.setMaxBytes(options.max_bytes_per_call);
  request.setWaitMillis(options.wait_ms);
  auto data = capnp::AnyStruct::Reader(request.asReader()).getDataSection();
  return std::string(reinterpret_cast<const char*>(data.begin()) + 24, data.size() - 24);
}

TEST(Reconnect, EveryElementArrivesOnceWhenConnectionsAreCutBeforeAReplyArrived) {
  DataCluster cluster;
  RelayedWorker worker(cluster.dispatcher());
  const clients::ReaderOptions options = CutReaderOf(cluster);
  auto reader = clients::DatasetReader::Open(options);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::vector<clients::Element> elements;
  clients::Element element;
  for (int cut = 0; cut < kCuts; ++cut) {
    // The reader's connection stops delivering right after a request went
    // through: the reply to it, and to any later one, waits in the relay.
    const size_t stalled = worker.relay().stalled();
    worker.relay().StallFirstToSend(RequestNeedle(options));
    while (worker.relay().stalled() == stalled) {
      // Read on, so that the reader asks for more; wait when nothing came.
      if ((*reader)->stats().buffered == 0) {
        const bool moved = WaitUntil(
            [&] { return (*reader)->stats().buffered > 0 || worker.relay().stalled() > stalled; });
        ASSERT_TRUE(moved) << "cut " << cut << ": no request came " << worker.relay().failure();
        continue;
      }
      Result<bool> next = (*reader)->Next(&element, kTestDeadline);
      ASSERT_TRUE(next.ok() && *next) << next.status().ToString();
      elements.push_back(element);
    }
    ASSERT_TRUE(WaitUntil([&] { return worker.relay().HeldServerBytes() > 0; }))
        << "cut " << cut << ": no reply came on the stalled connection "
        << worker.relay().failure();
    ASSERT_EQ(worker.relay().CutStalled(), 1u);
  }
  ReadToTheEnd(**reader, &elements);
  ExpectEveryElementOnce(elements);
  EXPECT_EQ(worker.relay().failure(), "");
}

TEST(Reconnect, AReaderThatNeverComesBackLeavesItsReplyToTheOthers) {
  DataCluster cluster;
  cluster.StartWorker(0, {"--consumer-hold-ms=300"});
  auto options = CutReaderOf(cluster);
  options.job.job_name = "shared";
  // One call out, and a read-ahead of one: the first reply that arrives
  // stops the reader, received and unacknowledged.
  auto gone_options = options;
  gone_options.calls_per_task = 1;
  gone_options.max_buffered_elements = 1;
  gone_options.seed = options.seed + 1;  // consumer ids of its own
  auto gone = clients::DatasetReader::Open(gone_options);
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  ASSERT_TRUE(WaitUntil([&] { return (*gone)->stats().buffered > 0; }));
  (*gone)->Close();  // with its reply, never read
  (*gone).reset();
  auto reader = clients::DatasetReader::Open(options);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::vector<clients::Element> elements;
  ReadToTheEnd(**reader, &elements);
  ExpectEveryElementOnce(elements);
}

}  // namespace
}  // namespace dispatch::testing
