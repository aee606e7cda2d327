// EtcdClient against real etcd members (tests/support/etcd_cluster.h), on a
// libuv loop through the uvkj bridge as in the dispatcher. Each test starts
// its own one-member cluster (about a second) on free loopback ports.
#include "reactor/etcd/etcd_client.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/loop_passes.h"
#include "tests/support/wait_until.h"

namespace dispatch::etcd {
namespace {

using dispatch::testing::EtcdCluster;
using dispatch::testing::LoopPasses;
using dispatch::testing::WaitUntil;

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Available()) {
      GTEST_SKIP() << "etcd is not installed (Debian etcd-server; scripts/bootstrap.sh installs it)";
    }
    ASSERT_TRUE(cluster_.Start()) << cluster_.error();
  }

  void TearDown() override {
    // The documented order: promises and watches, the client, the bridge, the loop.
    watches_.clear();
    client_.reset();
    io_holder_.reset();
    loop_.Close();
  }

  EtcdClient& Client(EtcdClientOptions options = {}) {
    if (options.endpoints.empty()) options.endpoints = cluster_.endpoints();
    client_ = std::make_unique<EtcdClient>(io_, std::move(options));
    return *client_;
  }

  // Runs the loop until `promise` is done (a test deadline guards a hang).
  template <typename T>
  T Await(kj::Promise<T> promise) {
    return io_.timer()
        .timeoutAfter(dispatch::testing::kTestDeadline.count() * kj::MILLISECONDS, kj::mv(promise))
        .wait(io_.wait_scope());
  }

  bool RunUntil(const std::function<bool()>& condition) { return WaitUntil(condition, LoopPasses(io_)); }

  // A watch whose batches are collected in `batches` and whose end in `ended`.
  struct Collected {
    std::vector<WatchBatch> batches;
    std::optional<Status> ended;
    size_t events() const {
      size_t n = 0;
      for (const auto& b : batches) n += b.events.size();
      return n;
    }
  };
  Collected& StartWatch(const std::string& key, const std::string& range_end, int64_t start_revision) {
    auto collected = std::make_unique<Collected>();
    Collected& c = *collected;
    watches_.push_back(client_->Watch(key, range_end, start_revision, [&c](Result<WatchBatch> batch) {
      if (batch.ok()) {
        c.batches.push_back(std::move(batch).value());
      } else {
        c.ended = batch.status();
      }
    }));
    collected_.push_back(std::move(collected));
    return c;
  }

  EtcdCluster cluster_;
  uvkj::UvLoop loop_;
  std::unique_ptr<uvkj::UvAsyncIo> io_holder_ = std::make_unique<uvkj::UvAsyncIo>(loop_.get());
  uvkj::UvAsyncIo& io_ = *io_holder_;
  std::unique_ptr<EtcdClient> client_;
  std::vector<std::unique_ptr<EtcdWatch>> watches_;
  std::vector<std::unique_ptr<Collected>> collected_;
};

// Fencing as the journal uses it: a transaction guarded by the leader key's
// create revision succeeds while that key lives, and fails (changing
// nothing) once the key was deleted and created again by someone else.
TEST_F(EtcdClientTest, AGuardedTxnFailsOnceTheKeysCreateRevisionChanged) {
  EtcdClient& client = Client();
  Txn campaign;
  campaign.compare.push_back(Compare::CreateRevisionIs("p/leader", 0));
  campaign.success.push_back(Op::Put("p/leader", "first"));
  campaign.failure.push_back(Op::Get("p/leader"));
  auto won = Await(client.Commit(campaign));
  ASSERT_TRUE(won.ok()) << won.status().ToString();
  ASSERT_TRUE(won->succeeded);
  const int64_t leader_rev = won->revision;

  auto guarded = [&](const std::string& key) {
    Txn txn;
    txn.compare.push_back(Compare::CreateRevisionIs("p/leader", leader_rev));
    txn.compare.push_back(Compare::VersionIs(key, 0));
    txn.success.push_back(Op::Put(key, "batch"));
    txn.failure.push_back(Op::Get("p/leader"));
    return txn;
  };
  auto first = Await(client.Commit(guarded("p/journal/1")));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->succeeded);
  // The slot compare makes a repeated append fail.
  auto again = Await(client.Commit(guarded("p/journal/1")));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->succeeded);

  // A takeover: the key is deleted (lease gone) and created by another.
  Txn takeover;
  takeover.success.push_back(Op::Delete("p/leader"));
  ASSERT_TRUE(Await(client.Commit(takeover)).ok());
  auto second = Await(client.Commit(campaign));
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(second->succeeded);

  auto fenced = Await(client.Commit(guarded("p/journal/2")));
  ASSERT_TRUE(fenced.ok()) << fenced.status().ToString();
  EXPECT_FALSE(fenced->succeeded);
  ASSERT_EQ(fenced->responses.size(), 1u);
  ASSERT_EQ(fenced->responses[0].range.kvs.size(), 1u);
  EXPECT_EQ(fenced->responses[0].range.kvs[0].create_revision, second->revision);
  auto slot = Await(client.Range("p/journal/2"));
  ASSERT_TRUE(slot.ok());
  EXPECT_TRUE(slot->kvs.empty()) << "a fenced transaction wrote its batch";
}

TEST_F(EtcdClientTest, KeepAliveNoticesAnExpiredAndARevokedLease) {
  EtcdClient& client = Client();
  auto lease = Await(client.LeaseGrant(2));  // etcd's smallest with its default timing
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(Await(client.Put("p/held", "x", lease->id)).ok());
  auto alive = Await(client.LeaseKeepAlive(lease->id));
  ASSERT_TRUE(alive.ok()) << alive.status().ToString();
  EXPECT_GT(*alive, 0);
  // No more keepalives: etcd expires it, and deletes the key it holds.
  // (Each check is a request of its own, waited for outside the loop.)
  ASSERT_TRUE(WaitUntil([&] {
    auto held = Await(client.Range("p/held"));
    return held.ok() && held->kvs.empty();
  }));
  auto expired = Await(client.LeaseKeepAlive(lease->id));
  EXPECT_EQ(expired.status().code(), StatusCode::kNotFound) << expired.status().ToString();

  auto revoked = Await(client.LeaseGrant(30));
  ASSERT_TRUE(revoked.ok());
  ASSERT_TRUE(Await(client.LeaseKeepAlive(revoked->id)).ok());
  Status revoke = Await(client.LeaseRevoke(revoked->id));
  ASSERT_TRUE(revoke.ok()) << revoke.ToString();
  EXPECT_EQ(Await(client.LeaseKeepAlive(revoked->id)).status().code(), StatusCode::kNotFound);
  // Revoking it again is etcd's NotFound (gRPC code 5, HTTP 404).
  Status twice = Await(client.LeaseRevoke(revoked->id));
  EXPECT_EQ(twice.code(), StatusCode::kNotFound) << twice.ToString();
  EXPECT_EQ(client.counters().errors, 1u);
}

TEST_F(EtcdClientTest, AWatchDeliversPutsAndDeletesInOrder) {
  EtcdClient& client = Client();
  auto start = Await(client.Put("other", "not watched"));
  ASSERT_TRUE(start.ok());
  Collected& watch = StartWatch("p/", PrefixEnd("p/"), *start + 1);
  ASSERT_TRUE(RunUntil([&] { return !watch.batches.empty() || watch.ended; }));
  ASSERT_FALSE(watch.ended) << watch.ended->ToString();
  EXPECT_TRUE(watch.batches[0].created);

  ASSERT_TRUE(Await(client.Put("p/a", "one")).ok());
  ASSERT_TRUE(Await(client.Put("other", "still not watched")).ok());
  Txn del;
  del.success.push_back(Op::Delete("p/a"));
  ASSERT_TRUE(Await(client.Commit(del)).ok());
  ASSERT_TRUE(RunUntil([&] { return watch.events() >= 2 || watch.ended; }));
  ASSERT_FALSE(watch.ended) << watch.ended->ToString();
  std::vector<WatchEvent> events;
  for (const auto& b : watch.batches) events.insert(events.end(), b.events.begin(), b.events.end());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[0].is_delete);
  EXPECT_EQ(events[0].kv.key, "p/a");
  EXPECT_EQ(events[0].kv.value, "one");
  EXPECT_TRUE(events[1].is_delete);
  EXPECT_EQ(events[1].kv.key, "p/a");
  EXPECT_GT(events[1].kv.mod_revision, events[0].kv.mod_revision);
  EXPECT_GE(client.counters().watch_lines, 2u);
}

std::string Pattern(size_t size) {
  std::string value(size, '\0');
  uint32_t x = 12345;
  for (auto& c : value) {
    x = x * 1103515245 + 12345;
    c = static_cast<char>(x >> 16);
  }
  return value;
}

// One 1 MiB value: its watch line (~1.4 MiB of base64 in JSON) arrives in
// many HTTP chunks and many reads, and decodes to the same bytes.
TEST_F(EtcdClientTest, AWatchDecodesAValueSpreadOverManyChunks) {
  EtcdClient& client = Client();
  Collected& watch = StartWatch("big", "", 0);
  ASSERT_TRUE(RunUntil([&] { return !watch.batches.empty() || watch.ended; }));
  const std::string value = Pattern(1 << 20);
  auto put = Await(client.Put("big", value));
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  ASSERT_TRUE(RunUntil([&] { return watch.events() >= 1 || watch.ended; }));
  ASSERT_FALSE(watch.ended) << watch.ended->ToString();
  const WatchEvent& event = watch.batches.back().events.at(0);
  EXPECT_EQ(event.kv.value.size(), value.size());
  EXPECT_TRUE(event.kv.value == value);
  auto read = Await(client.Range("big"));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->kvs.size(), 1u);
  EXPECT_TRUE(read->kvs[0].value == value);
}

TEST_F(EtcdClientTest, AWatchLineOverTheLimitEndsTheWatchAndIsCounted) {
  EtcdClientOptions options;
  options.max_stream_line_bytes = 64 * 1024;
  EtcdClient& client = Client(options);
  Collected& watch = StartWatch("big", "", 0);
  ASSERT_TRUE(RunUntil([&] { return !watch.batches.empty() || watch.ended; }));
  ASSERT_TRUE(Await(client.Put("big", Pattern(100 * 1024))).ok());
  ASSERT_TRUE(RunUntil([&] { return watch.ended.has_value(); }));
  EXPECT_EQ(watch.ended->code(), StatusCode::kResourceExhausted) << watch.ended->ToString();
  EXPECT_NE(watch.ended->message().find("limit of 65536 bytes"), std::string::npos);
  EXPECT_EQ(client.counters().stream_lines_over_limit, 1u);
}

TEST_F(EtcdClientTest, AnAnswerOverTheLimitIsRefusedAndCounted) {
  EtcdClientOptions options;
  options.max_answer_bytes = 16 * 1024;
  EtcdClient& client = Client(options);
  ASSERT_TRUE(Await(client.Put("big", Pattern(64 * 1024))).ok());
  auto read = Await(client.Range("big"));
  EXPECT_EQ(read.status().code(), StatusCode::kResourceExhausted) << read.status().ToString();
  EXPECT_EQ(client.counters().answers_over_limit, 1u);
  // The client goes on working.
  ASSERT_TRUE(Await(client.Put("small", "x")).ok());
}

// etcd's gateway sends its error answers chunked with a trailer after the
// last chunk: the request after one, on the same client and endpoint, must
// still be answered (not fail to parse what the trailer left behind).
TEST_F(EtcdClientTest, TheRequestAfterAnErrorAnswerIsAnsweredToo) {
  EtcdClient& client = Client();
  auto first = Await(client.Put("k", "1"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(Await(client.Put("k", "2")).ok());
  auto latest = Await(client.Put("k", "3"));
  ASSERT_TRUE(latest.ok());
  ASSERT_TRUE(Await(client.Compact(*latest, /*physical=*/true)).ok());
  for (int i = 0; i < 3; ++i) {
    auto compacted = Await(client.Range("k", {}, 0, /*descending=*/false, *first));
    ASSERT_FALSE(compacted.ok());
    EXPECT_NE(compacted.status().message().find("compacted"), std::string::npos) << compacted.status().ToString();
    auto next = Await(client.Range("k"));
    ASSERT_TRUE(next.ok()) << "after error answer " << i + 1 << ": " << next.status().ToString();
    ASSERT_EQ(next->kvs.size(), 1u);
    EXPECT_EQ(next->kvs[0].value, "3");
  }
  EXPECT_EQ(client.counters().unavailable, 0u);
  EXPECT_EQ(client.counters().connections_retired, 3u);
}

// A dead endpoint first in the list: the request is Unavailable naming it,
// and the next request goes to the next endpoint.
TEST_F(EtcdClientTest, ADeadEndpointIsUnavailableAndTheNextRequestGoesToTheNext) {
  EtcdClientOptions options;
  // Port 1 on loopback: nothing listens there (root could, nobody does).
  options.endpoints = {"http://127.0.0.1:1", cluster_.endpoints()[0]};
  EtcdClient& client = Client(options);
  auto failed = Await(client.Put("k", "v"));
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("http://127.0.0.1:1/v3/kv/put"), std::string::npos)
      << failed.status().ToString();
  EXPECT_EQ(client.counters().endpoint_switches, 1u);
  EXPECT_EQ(client.endpoint(), cluster_.endpoints()[0]);
  auto put = Await(client.Put("k", "v"));
  EXPECT_TRUE(put.ok()) << put.status().ToString();
}

}  // namespace
}  // namespace dispatch::etcd

namespace dispatch::etcd {
namespace {

// Three members; the one the client talks to is killed (kill -9): requests
// fail Unavailable while the client moves on, then succeed on another
// member, and what was acknowledged before is still there. The pause is
// printed, not asserted.
TEST(EtcdClientThreeMembers, AKilledMemberIsLeftForTheNextAndNothingAcknowledgedIsLost) {
  if (!dispatch::testing::EtcdCluster::Available()) GTEST_SKIP() << "etcd is not installed";
  dispatch::testing::EtcdCluster cluster({.members = 3});
  ASSERT_TRUE(cluster.Start()) << cluster.error();
  uvkj::UvLoop loop;
  auto io = std::make_unique<uvkj::UvAsyncIo>(loop.get());
  {
    EtcdClientOptions options;
    options.endpoints = cluster.endpoints();
    options.request_timeout = std::chrono::milliseconds(1000);
    EtcdClient client(*io, options);
    auto await = [&](auto promise) { return promise.wait(io->wait_scope()); };
    ASSERT_TRUE(await(client.Put("acked", "before")).ok());
    cluster.Kill(0);
    const auto killed = std::chrono::steady_clock::now();
    int failures = 0;
    ASSERT_TRUE(dispatch::testing::WaitUntil([&] {
      auto put = await(client.Put("after", "x"));
      if (!put.ok()) ++failures;
      return put.ok();
    }));
    std::printf("member killed: writes paused %lld ms, %d failed attempts, client now on %s\n",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - killed)
                                           .count()),
                failures, client.endpoint().c_str());
    EXPECT_NE(client.endpoint(), cluster.endpoints()[0]);
    EXPECT_GE(client.counters().endpoint_switches, 1u);
    auto read = await(client.Range("acked"));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    ASSERT_EQ(read->kvs.size(), 1u);
    EXPECT_EQ(read->kvs[0].value, "before");
  }
  io.reset();
  loop.Close();
}

}  // namespace
}  // namespace dispatch::etcd
