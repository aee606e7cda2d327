// EtcdJournal (reactor/ha/etcd_journal.h) against a real etcd member, on a
// libuv loop through the uvkj bridge as in the dispatcher, and the journal
// group codec alone: replies wait for the transaction; what accumulates
// while one is in flight goes out as the next single transaction, split at
// the group byte limit (counted); with several in flight, writes are
// released in order only; a backlog past its limit refuses new
// updates naming it (counted); a stolen leadership fails the journal
// (fenced) and acknowledges nothing of the group in flight. EtcdStateReader
// reads such a journal back with fewer keys per request when an answer is
// over the client's limit.
#include "reactor/ha/etcd_journal.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "reactor/ha/etcd_state_reader.h"
#include "reactor/ha/wire/journal_group_codec.h"
#include "reactor/ha/wire/pass_codec.h"
#include "reactor/ha/wire/snapshot_codec.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/loop_passes.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_until.h"
#include "tests/storage/test_util.h"

namespace dispatch::ha {
namespace {

using dispatch::testing::EtcdCluster;
using dispatch::testing::LoopPasses;
using dispatch::testing::WaitUntil;

constexpr const char* kPrefix = "/jt";

JournalBatch Pass(int records, size_t record_bytes, int tag) {
  JournalBatch batch;
  for (int i = 0; i < records; ++i) batch.AddRecord(std::string(record_bytes, static_cast<char>('a' + (tag + i) % 26)));
  return batch;
}

TEST(JournalGroupCodec, RoundTripsEveryPartOfEveryPassAndRefusesADamagedByte) {
  JournalBatch one = Pass(3, 10, 0);
  one.PutDataset("ds-1", "range count=5");
  one.PutResult(7, "seven");
  JournalBatch two = Pass(1, 100, 5);
  two.DeleteResult(7);
  const std::string value = EncodeJournalGroup(41, {&one, &two});
  auto decoded = DecodeJournalGroup(value, "k");
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->first_seq, 41u);
  EXPECT_EQ(decoded->record_count, 4u);
  ASSERT_EQ(decoded->passes.size(), 2u);
  EXPECT_EQ(decoded->passes[0].records(), one.records());
  EXPECT_EQ(decoded->passes[0].dataset_puts()[0].definition, "range count=5");
  EXPECT_EQ(decoded->passes[0].result_puts()[0].bytes, "seven");
  EXPECT_EQ(decoded->passes[1].result_deletes(), std::vector<uint64_t>{7});
  EXPECT_LE(value.size(), EstimatePassBytes(one) + EstimatePassBytes(two));
  std::string damaged = value;
  damaged[damaged.size() / 2] ^= 1;
  auto refused = DecodeJournalGroup(damaged, "P/journal/41");
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(refused.status().message().find("P/journal/41"), std::string::npos);
  EXPECT_EQ(JournalKey("/p", 41), "/p/journal/00000000000000000041");
}

// `n` bytes gzip cannot shrink (xorshift64 from `x`, which moves on).
std::string Noise(size_t n, uint64_t& x) {
  std::string out(n, '\0');
  for (char& c : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  return out;
}

TEST(JournalGroupCodec, ARepetitiveGroupIsStoredGzippedAnIncompressibleOnePackedAndBothRoundTrip) {
  JournalBatch repetitive = Pass(200, 60, 0);  // 200 records of one repeated byte each
  const std::string zipped = EncodeJournalGroup(1, {&repetitive});
  ASSERT_GE(zipped.size(), 6u);
  EXPECT_EQ(static_cast<unsigned char>(zipped[4]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(zipped[5]), 0x8b);
  EXPECT_LT(zipped.size(), 200u * 60 / 4) << "gzip did not shrink 200 repeated records";
  auto decoded = DecodeJournalGroup(zipped, "k");
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->passes[0].records(), repetitive.records());

  JournalBatch random;
  uint64_t x = 2463534242ull;
  const std::string noise = Noise(4000, x);
  random.AddRecord(noise);
  const std::string packed = EncodeJournalGroup(9, {&random});
  EXPECT_FALSE(static_cast<unsigned char>(packed[4]) == 0x1f && static_cast<unsigned char>(packed[5]) == 0x8b);
  auto plain = DecodeJournalGroup(packed, "k");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->passes[0].records()[0], noise);

  // A gzipped body damaged behind a valid CRC (as a buggy writer would
  // leave it) is refused, naming the key.
  std::string body = zipped.substr(4);
  body[body.size() / 2] ^= 0x55;
  auto refused = DecodeJournalGroup(WithCrc32c(body), "P/journal/1");
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("P/journal/1"), std::string::npos);
  // So is gzip's magic in front of what is not gzip.
  auto fake = DecodeJournalGroup(WithCrc32c(std::string("\x1f\x8b") + std::string(100, 'x')), "P/journal/2");
  EXPECT_EQ(fake.status().code(), StatusCode::kDataLoss) << fake.status().ToString();
}

TEST(SnapshotCodec, AnImageCutIntoChunksRoundTripsAndADamagedChunkIsRefusedNamingItsKey) {
  JournalBatch tables;
  tables.PutDataset("ds-1", "range count=5");
  tables.PutResult(7, std::string(3000, 'r'));
  const std::string state(10000, 's');
  auto image = EncodeSnapshotImage(41, state, tables);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  SnapshotChunks chunks = CutSnapshot(41, *image, 1000);
  EXPECT_EQ(chunks.descriptor.chunks, (image->size() + 999) / 1000);
  EXPECT_EQ(chunks.values.size(), chunks.descriptor.chunks);
  auto descriptor = DecodeSnapshotDescriptor(EncodeSnapshotDescriptor(chunks.descriptor), "cur");
  ASSERT_TRUE(descriptor.ok()) << descriptor.status().ToString();
  EXPECT_EQ(descriptor->seq, 41u);
  EXPECT_EQ(descriptor->bytes, image->size());
  std::string joined;
  for (size_t i = 0; i < chunks.values.size(); ++i) {
    auto payload = SnapshotChunkPayload(chunks.values[i], SnapshotChunkKey("/p", 41, i), 1000);
    ASSERT_TRUE(payload.ok()) << payload.status().ToString();
    joined += *payload;
  }
  auto decoded = DecodeSnapshotImage(joined, "image");
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->seq, 41u);
  EXPECT_EQ(decoded->state, state);
  ASSERT_EQ(decoded->tables.result_puts().size(), 1u);
  EXPECT_EQ(decoded->tables.result_puts()[0].bytes, std::string(3000, 'r'));
  EXPECT_EQ(decoded->tables.dataset_puts()[0].key, "ds-1");

  std::string damaged = chunks.values[2];
  damaged[10] ^= 1;
  const std::string key = SnapshotChunkKey("/p", 41, 2);
  EXPECT_EQ(key, "/p/snapshot/00000000000000000041/00000000000000000002");
  auto refused = SnapshotChunkPayload(damaged, key, 1000);
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(refused.status().message().find(key), std::string::npos) << refused.status().ToString();
  // A descriptor whose sizes disagree is refused too.
  SnapshotDescriptor wrong = chunks.descriptor;
  wrong.chunks += 1;
  EXPECT_EQ(DecodeSnapshotDescriptor(EncodeSnapshotDescriptor(wrong), "cur").status().code(), StatusCode::kDataLoss);
  // "current" sorts after every chunk prefix, so one range deletes them all.
  EXPECT_LT(SnapshotChunkKey("/p", ~uint64_t{0}, ~uint64_t{0}), SnapshotCurrentKey("/p"));
}

class EtcdJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Available()) {
      GTEST_SKIP() << "etcd is not installed (Debian etcd-server; scripts/bootstrap.sh installs it)";
    }
    ASSERT_TRUE(cluster_.Start()) << cluster_.error();
    etcd::EtcdClientOptions options;
    options.endpoints = cluster_.endpoints();
    options.request_timeout = std::chrono::milliseconds(2000);
    client_ = std::make_unique<etcd::EtcdClient>(io_, options);
    // Our leadership: the leader key's create revision. A member just
    // started on a loaded machine may not answer the first request in time:
    // campaign until it does (a deadline bounds it).
    etcd::Txn campaign;
    campaign.compare.push_back(etcd::Compare::CreateRevisionIs(std::string(kPrefix) + "/leader", 0));
    campaign.success.push_back(etcd::Op::Put(std::string(kPrefix) + "/leader", "me"));
    Status last;
    ASSERT_TRUE(WaitUntil([&] {
      auto won = Await(client_->Commit(campaign));
      if (won.ok() && won->succeeded) leader_revision_ = won->revision;
      last = won.ok() ? Status::Ok() : won.status();
      return leader_revision_ != 0;
    })) << last.ToString();
  }

  void TearDown() override {
    journal_.reset();
    client_.reset();
    io_holder_.reset();
    loop_.Close();
  }

  template <typename T>
  T Await(kj::Promise<T> promise) {
    return io_.timer()
        .timeoutAfter(dispatch::testing::kTestDeadline.count() * kj::MILLISECONDS, kj::mv(promise))
        .wait(io_.wait_scope());
  }

  EtcdJournal& Journal(EtcdJournalOptions options) {
    options.prefix = kPrefix;
    options.leader_revision = leader_revision_;
    journal_ = std::make_unique<EtcdJournal>(io_, *client_, options, [this](const Status& s) { failure_ = s; });
    return *journal_;
  }

  // Tells the journal of one pass as the next write. released_: the writes
  // etcd holds (the journal's durable()); Rejected(): those it never will,
  // once it failed.
  void Append(EtcdJournal& journal, const JournalBatch& pass) {
    journal.SetListener(&listener_);
    journal.Written(++written_, &pass, next_seq_);
    next_seq_ += pass.record_count();
  }
  struct Listener final : reactor::DurabilityListener {
    explicit Listener(EtcdJournalTest& test) : test(test) {}
    void OnStageAdvanced() override {
      const int durable = static_cast<int>(test.journal_->durable());
      if (durable < test.released_) test.released_went_back_ = true;
      test.released_ = durable;
    }
    void OnStageFailed(const Status&) override {}
    EtcdJournalTest& test;
  };
  // Writes that etcd will never hold: told after the last it holds, once the
  // journal failed.
  int Rejected() const {
    return journal_ != nullptr && journal_->failed() ? static_cast<int>(written_) - released_ : 0;
  }

  bool RunUntil(const std::function<bool()>& condition) { return WaitUntil(condition, LoopPasses(io_)); }

  // Every group in etcd, decoded, in key order.
  std::vector<DecodedGroup> Groups() {
    auto range = Await(client_->Range(std::string(kPrefix) + "/journal/",
                                      etcd::PrefixEnd(std::string(kPrefix) + "/journal/")));
    EXPECT_TRUE(range.ok());
    std::vector<DecodedGroup> out;
    for (const auto& kv : range->kvs) {
      auto group = DecodeJournalGroup(kv.value, kv.key);
      EXPECT_TRUE(group.ok()) << group.status().ToString();
      EXPECT_EQ(kv.key, JournalKey(kPrefix, group->first_seq));
      out.push_back(std::move(group).value());
    }
    return out;
  }

  EtcdCluster cluster_;
  uvkj::UvLoop loop_;
  std::unique_ptr<uvkj::UvAsyncIo> io_holder_ = std::make_unique<uvkj::UvAsyncIo>(loop_.get());
  uvkj::UvAsyncIo& io_ = *io_holder_;
  std::unique_ptr<etcd::EtcdClient> client_;
  std::unique_ptr<EtcdJournal> journal_;
  int64_t leader_revision_ = 0;
  uint64_t next_seq_ = 1;
  Listener listener_{*this};
  uint64_t written_ = 0;
  int released_ = 0;
  bool released_went_back_ = false;
  std::optional<Status> failure_;
};

TEST_F(EtcdJournalTest, PassesAppendedWhileATransactionIsInFlightGoOutTogetherSplitAtTheByteLimit) {
  EtcdJournalOptions options;
  options.max_group_bytes = 4096;
  EtcdJournal& journal = Journal(options);
  // The first goes out alone; the next 20 (about 1 KiB each) wait for it
  // and then go as groups of at most 4 KiB.
  for (int i = 0; i < 21; ++i) Append(journal, Pass(2, 400, i));
  EXPECT_EQ(released_, 0) << "released before etcd acknowledged";
  EXPECT_FALSE(journal.idle());
  ASSERT_TRUE(RunUntil([&] { return released_ == 21; })) << released_;
  EXPECT_TRUE(journal.idle());
  EXPECT_FALSE(failure_.has_value());
  const auto& stats = journal.stats();
  EXPECT_GE(stats.groups_split, 4u);
  EXPECT_LT(stats.transactions, 21u);
  EXPECT_EQ(stats.records, 42u);
  // In etcd: contiguous groups, every record once, in order.
  uint64_t expect = 1;
  for (const DecodedGroup& group : Groups()) {
    EXPECT_EQ(group.first_seq, expect);
    expect += group.record_count;
  }
  EXPECT_EQ(expect, 43u);
}

TEST_F(EtcdJournalTest, SeveralGroupsInFlightReleaseTheirWritesInOrderOnly) {
  EtcdJournalOptions options;
  options.max_group_bytes = 4096;
  options.max_in_flight = 3;
  EtcdJournal& journal = Journal(options);
  // The first three go out at once, each alone; the rest wait for room and
  // then go as groups of at most 4 KiB.
  for (int i = 0; i < 21; ++i) Append(journal, Pass(2, 400, i));
  EXPECT_EQ(released_, 0) << "released before etcd acknowledged";
  ASSERT_TRUE(RunUntil([&] { return released_ == 21; })) << released_;
  EXPECT_FALSE(released_went_back_);
  EXPECT_TRUE(journal.idle());
  EXPECT_EQ(journal.acknowledged_seq(), 42u);
  EXPECT_FALSE(failure_.has_value());
  EXPECT_EQ(journal.stats().records, 42u);
  EXPECT_GE(journal.stats().transactions, 4u);
  uint64_t expect = 1;
  for (const DecodedGroup& group : Groups()) {
    EXPECT_EQ(group.first_seq, expect);
    expect += group.record_count;
  }
  EXPECT_EQ(expect, 43u);
}

TEST_F(EtcdJournalTest, ABacklogOverItsLimitRefusesNewUpdatesNamingItUntilEtcdAnswersAgain) {
  EtcdJournalOptions options;
  options.max_queued_bytes = 8192;
  EtcdJournal& journal = Journal(options);
  ASSERT_TRUE(journal.Admit().ok());
  cluster_.Signal(0, SIGSTOP);  // etcd stops answering: nothing is acknowledged
  int appended = 0;
  while (journal.Admit().ok() && appended < 100) {
    Append(journal, Pass(1, 1000, appended));
    ++appended;
  }
  Status refused = journal.Admit();
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("limit 8192 bytes"), std::string::npos) << refused.ToString();
  // Counted each time: the loop's last check and this one.
  EXPECT_EQ(journal.stats().refused_backlog, 2u);
  EXPECT_LT(appended, 100);
  EXPECT_EQ(released_, 0);
  cluster_.Signal(0, SIGCONT);
  ASSERT_TRUE(RunUntil([&] { return released_ == appended; })) << released_ << " of " << appended;
  EXPECT_TRUE(journal.Admit().ok());
  EXPECT_FALSE(failure_.has_value());
}

TEST_F(EtcdJournalTest, AStolenLeadershipFailsTheGroupInFlightAndEveryLaterOne) {
  EtcdJournal& journal = Journal({});
  Append(journal, Pass(1, 10, 0));
  ASSERT_TRUE(RunUntil([&] { return released_ == 1; }));
  // Another member's leadership: deleted, created again.
  etcd::Txn del;
  del.success.push_back(etcd::Op::Delete(std::string(kPrefix) + "/leader"));
  ASSERT_TRUE(Await(client_->Commit(del)).ok());
  ASSERT_TRUE(Await(client_->Put(std::string(kPrefix) + "/leader", "another")).ok());
  Append(journal, Pass(1, 10, 1));
  Append(journal, Pass(1, 10, 2));
  ASSERT_TRUE(RunUntil([&] { return Rejected() == 2; })) << Rejected();
  EXPECT_EQ(released_, 1);
  ASSERT_TRUE(failure_.has_value());
  EXPECT_EQ(failure_->code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(failure_->message().find("fenced"), std::string::npos) << failure_->ToString();
  EXPECT_EQ(Groups().size(), 1u) << "a fenced leader appended";
  EXPECT_FALSE(journal.Admit().ok());
}

TEST_F(EtcdJournalTest, AJournalReadOverTheAnswerLimitIsReadAgainInSmallerRangesAndArrivesWhole) {
  EtcdJournalOptions options;
  options.max_group_bytes = 4096;
  EtcdJournal& journal = Journal(options);
  // 60 groups of one 3000-byte record each (each pass waits for the one
  // before it, so no two share a group), of bytes gzip cannot shrink.
  constexpr int kGroups = 60;
  std::vector<std::string> records;
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < kGroups; ++i) {
    const std::string record = Noise(3000, x);
    records.push_back(record);
    JournalBatch pass;
    pass.AddRecord(record);
    Append(journal, pass);
    ASSERT_TRUE(RunUntil([&] { return released_ == i + 1; })) << released_;
  }
  ASSERT_EQ(Groups().size(), static_cast<size_t>(kGroups));
  // A reader whose client takes answers of at most 64 KiB: a range of all
  // 60 groups (about 240 KiB as base64 in JSON) is over it.
  etcd::EtcdClientOptions small;
  small.endpoints = cluster_.endpoints();
  small.max_answer_bytes = 64 << 10;
  etcd::EtcdClient client(io_, small);
  EtcdStateReader reader(client, kPrefix);
  dispatch::testing::TempDir dir;
  auto store = storage::Store::Open(storage::testing::OptionsFor(dir.path(), storage::Synchronous::kNormal));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Status read = Await(reader.ReadJournal(**store, 0));
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_GE(reader.ranges_shrunk(), 1u);
  EXPECT_EQ(reader.groups_read(), static_cast<uint64_t>(kGroups));
  auto read_back = storage::testing::ReplayAll(**store, 0);
  ASSERT_TRUE(read_back.ok()) << read_back.status().ToString();
  ASSERT_EQ(read_back->size(), static_cast<size_t>(kGroups));
  for (int i = 0; i < kGroups; ++i) {
    EXPECT_EQ((*read_back)[i].second, records[i]) << "record " << i + 1;
  }
}

}  // namespace
}  // namespace dispatch::ha
