// Clients with address lists against a real HA group (issue 20, Clients):
// real etcd, real dispatchers in HA mode (tests/etcd/ha_group.h), real
// dispatch-worker and dispatchctl processes, embedded WorkerAgent, Coordinator
// and DatasetReader.
//  - a client given "STANDBY,LEADER" (or only a standby) reaches the leader;
//    a list where nobody serves fails naming each address and its failure;
//  - after kill -9 of the leader, a worker, a coordinator and a consumer given
//    both addresses carry on with the new leader exactly as after a restart:
//    they see a new incarnation, no split is read twice or lost, every
//    closure's result arrives once.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "clients/builtin_dataset_kinds.h"
#include "clients/dataset_definition.h"
#include "clients/dataset_reader.h"
#include "common/rpc_status.h"
#include "tests/closures/closure_test_support.h"
#include "tests/etcd/ha_group.h"
#include "tests/integration/client_loop.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {
namespace {

// A DYNAMIC reader of a built-in `range` dataset with a small read-ahead.
clients::ReaderOptions RangeReader(const std::string& dispatcher, const std::string& definition) {
  clients::ReaderOptions options;
  options.dispatcher_address = dispatcher;
  Result<clients::KindDefinition> parsed = clients::ParseKindDefinition(definition);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  Result<clients::DatasetSpec> spec = clients::BuiltinDatasetSpec(*parsed);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  options.dataset = *spec;
  options.job.processing_mode = rpc::ProcessingMode::DYNAMIC;
  options.job.heartbeat_interval_ms = 100;
  options.max_buffered_elements = 256;
  options.max_elements_per_call = 64;
  options.seed = TestSeed();
  return options;
}

class HaClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Available()) {
      GTEST_SKIP() << "etcd is not installed (Debian etcd-server; scripts/bootstrap.sh installs it)";
    }
    ASSERT_TRUE(etcd_.Start()) << etcd_.error();
    group_ = std::make_unique<HaGroup>(etcd_, 2);
    group_->Start(0);
    ASSERT_EQ(group_->WaitLeader(), 0) << group_->Ready(0);
    group_->Start(1);
    ASSERT_TRUE(group_->WaitStandby(1)) << group_->Ready(1);
  }

  EtcdCluster etcd_;
  std::unique_ptr<HaGroup> group_;
  TempDir dir_;
};

TEST_F(HaClientsTest, ClientsGivenTheStandbyFirstReachTheLeader) {
  const std::string leader = group_->address(0);
  const std::string standby_first = group_->AddressList({1, 0});
  CommandResult listed = RunDispatchctl({"--dispatcher=" + standby_first, "datasets"});
  EXPECT_EQ(listed.exit_code, 0) << listed.output;

  ClientLoop loop;
  EXPECT_EQ(loop.Connect(standby_first)->address(), leader);
  // Only a dead address and the standby: the standby's refusal names the
  // leader, which is followed although it is not in the list, and remembered.
  auto addresses = clients::DispatcherAddresses::Parse(
      "unix:" + dir_.File("nobody.sock") + "," + group_->address(1));
  ASSERT_TRUE(addresses.ok());
  EXPECT_EQ(loop.Wait(clients::DispatcherConnection::Connect(loop.io().network(), *addresses, ""))->address(),
            leader);
  EXPECT_EQ(addresses->RoundOrder().front(), leader);
  // The next round goes to the leader first: the standby is not asked.
  EXPECT_EQ(loop.Wait(clients::DispatcherConnection::Connect(loop.io().network(), *addresses, ""))->address(),
            leader);

  auto coordinator = MakeCoordinator(standby_first);
  auto value = coordinator->Schedule("echo", "to the leader");
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  auto worker = StartClosureWorker(standby_first, 1);
  EXPECT_EQ(FetchOrDie(*value), "to the leader");
}

TEST_F(HaClientsTest, AListWhereNobodyServesFailsNamingEachAddress) {
  const std::string dead = "unix:" + dir_.File("nobody.sock");
  group_->Kill9(0);  // the standby still names it until its lease expires
  ClientLoop loop;
  kj::Maybe<kj::Exception> failed = kj::runCatchingExceptions([&] {
    loop.Wait(clients::DispatcherConnection::Connect(loop.io().network(), dead + "," + group_->address(1), ""));
  });
  KJ_IF_MAYBE (e, failed) {
    Status status = StatusFromException(*e);
    EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
    EXPECT_NE(status.message().find(dead + ": "), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find(group_->address(1) + ": Unavailable: not the leader"), std::string::npos)
        << status.ToString();
  } else {
    // The standby took over already (a loaded machine): then it must serve.
    EXPECT_EQ(group_->Leader(), 1);
  }
  // A malformed list is refused before anything is tried.
  kj::Maybe<kj::Exception> malformed = kj::runCatchingExceptions([&] {
    loop.Wait(clients::DispatcherConnection::Connect(loop.io().network(), group_->address(1) + ",,", ""));
  });
  KJ_IF_MAYBE (e, malformed) {
    EXPECT_EQ(StatusFromException(*e).code(), StatusCode::kInvalidArgument) << e->getDescription().cStr();
  } else {
    ADD_FAILURE() << "a list with an empty entry was accepted";
  }
}

TEST_F(HaClientsTest, AWorkerACoordinatorAndAConsumerCarryOnWithTheNewLeaderAfterKillOfTheLeader) {
  const std::string both = group_->AddressList({1, 0});  // the standby first
  // An embedded worker for closures only: it announces a dataset kind of its
  // own, so the DYNAMIC job below goes to dispatch-worker alone.
  clients::WorkerAgentOptions agent_options;
  agent_options.dispatcher_address = both;
  agent_options.worker_address = "agent-ha";
  agent_options.heartbeat_interval_ms = 50;
  agent_options.backoff_initial_ms = 20;
  agent_options.backoff_max_ms = 200;
  agent_options.seed = TestSeed();
  agent_options.max_closures = 2;
  agent_options.dataset_kinds = {"closures-only"};
  auto agent = std::make_unique<clients::WorkerAgent>(agent_options, std::make_unique<RecordingFactory>());
  ASSERT_TRUE(agent
                  ->RegisterFunction("twice", [](const clients::ClosureCall& call) {
                    return clients::ClosureOutput::Result(std::string(call.args()) + std::string(call.args()));
                  })
                  .ok());
  ASSERT_TRUE(agent->Start().ok());
  ASSERT_TRUE(agent->WaitFor([](const clients::WorkerAgentStatus& s) { return s.registered; }, kTestDeadline));
  const uint64_t first_incarnation = agent->status().dispatcher_incarnation;
  auto data_worker = StartClosureWorker(both, 1);  // serves the range dataset

  auto coordinator = MakeCoordinator(both);
  std::vector<clients::RemoteValue> values;
  for (int i = 0; i < 10; ++i) {
    auto value = coordinator->Schedule("twice", std::to_string(i));
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    values.push_back(*value);
  }
  for (int i = 0; i < 10; ++i) EXPECT_EQ(FetchOrDie(values[i]), std::to_string(i) + std::to_string(i));

  // A consumer mid-read: a DYNAMIC job over many splits, read ahead little,
  // so that splits are still handed out after the takeover.
  constexpr uint64_t kCount = 40000;
  clients::ReaderOptions reader_options = RangeReader(both, "range count=40000 splits=200");
  auto reader = clients::DatasetReader::Open(reader_options);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::vector<uint64_t> read;
  clients::Element element;
  while (read.size() < 1000) {
    Result<bool> next = (*reader)->Next(&element, kTestDeadline);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    ASSERT_TRUE(*next) << "the read ended early";
    read.push_back(std::stoull(element.data));
  }

  const auto killed = std::chrono::steady_clock::now();
  group_->Kill9(0);
  ASSERT_EQ(group_->WaitLeader(), 1) << group_->Ready(1);
  printf("the standby served %lld ms after kill -9 of the leader\n",
         static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now() - killed)
                                    .count()));
  group_->Start(0);  // back, as a standby of the new leader

  // The consumer reads on to the end: every element once, none lost.
  while (true) {
    Result<bool> next = (*reader)->Next(&element, kTestDeadline);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!*next) break;
    read.push_back(std::stoull(element.data));
  }
  (*reader)->Close();
  std::sort(read.begin(), read.end());
  ASSERT_EQ(read.size(), kCount) << "elements read twice or lost across the takeover";
  for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(read[i], i) << "element " << i;

  // The coordinator's closures go on with the new leader, results arrive once.
  values.clear();
  for (int i = 10; i < 20; ++i) {
    auto value = coordinator->Schedule("twice", std::to_string(i));
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    values.push_back(*value);
  }
  for (int i = 10; i < 20; ++i) EXPECT_EQ(FetchOrDie(values[i - 10]), std::to_string(i) + std::to_string(i));
  // Both saw a new incarnation, as after a restart of a single dispatcher.
  EXPECT_TRUE(agent->WaitFor(
      [&](const clients::WorkerAgentStatus& s) {
        return s.registered && s.dispatcher_restarts >= 1 && s.dispatcher_incarnation != first_incarnation;
      },
      kTestDeadline))
      << "the worker agent did not re-register with the new leader";
  EXPECT_GE(coordinator->status().dispatcher_restarts, 1u);
  EXPECT_EQ(coordinator->status().dispatcher_incarnation, agent->status().dispatcher_incarnation);
  EXPECT_TRUE(group_->WaitStandby(0)) << group_->Ready(0);
  agent->Stop();
}

}  // namespace
}  // namespace dispatch::testing
