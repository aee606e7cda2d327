// RecordBudget: the sizes it predicts are the journal's exact encoded sizes,
// so a list cut with it fills a record to the limit and never past it (one
// more item would not fit), and the runs keep order and hold every item.
#include "state/record_budget.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include "reactor/durable_state.h"
#include "state/closure_updates.h"

namespace dispatch::reactor {
namespace {

using namespace ::dispatch::state;  // NOLINT: the budget's functions under test

constexpr size_t kLimit = 64 * 1024;

// Encoded size of a ClosureBatch.released / assigned of `n` items.
size_t ReleasedBytes(size_t n) {
  capnp::MallocMessageBuilder message;
  auto update = message.initRoot<journal::Update>();
  update.setTimeMicros(1);
  auto list = update.initClosureBatch().initReleased(static_cast<unsigned>(n));
  for (unsigned i = 0; i < n; ++i) list.set(i, i + 1);
  return EncodeUpdate(update.asReader()).size();
}

size_t AssignedBytes(size_t n) {
  capnp::MallocMessageBuilder message;
  auto update = message.initRoot<journal::Update>();
  auto list = update.initClosureBatch().initAssigned(static_cast<unsigned>(n));
  for (unsigned i = 0; i < n; ++i) {
    list[i].setClosureId(i + 1);
    list[i].setWorkerId(7);
    list[i].setAttempt(1);
  }
  return EncodeUpdate(update.asReader()).size();
}

size_t ProduceSplitBytes(size_t n) {
  capnp::MallocMessageBuilder message;
  auto update = message.initRoot<journal::Update>();
  auto produce = update.initProduceSplit();
  produce.setJobId(1);
  auto list = produce.initSplitIndices(static_cast<unsigned>(n));
  for (unsigned i = 0; i < n; ++i) list.set(i, i);
  return EncodeUpdate(update.asReader()).size();
}

TEST(RecordBudget, IdListsFillARecordExactly) {
  const size_t n = IdsPerRecord(kLimit);
  EXPECT_LE(ReleasedBytes(n), kLimit);
  EXPECT_GT(ReleasedBytes(n + 2), kLimit);  // a spare word: ids carry no tag word
}

TEST(RecordBudget, AssignmentsFitARecord) {
  const size_t n = AssignmentsPerRecord(kLimit);
  EXPECT_LE(AssignedBytes(n), kLimit);
  EXPECT_GT(AssignedBytes(n + 1), kLimit);
}

TEST(RecordBudget, SplitGrantsFitARecordExactly) {
  const size_t n = SplitIndicesPerRecord(kLimit);
  EXPECT_EQ(ProduceSplitBytes(n), kLimit);
  EXPECT_GT(ProduceSplitBytes(n + 1), kLimit);
}

TEST(RecordBudget, ScheduledClosuresCutIntoRunsThatEachFitTheirRecord) {
  // Closures of assorted sizes; each run, built as a record, fits the limit
  // and would not fit with the next closure.
  std::vector<size_t> args;
  for (size_t i = 0; i < 200; ++i) args.push_back((i * 7919) % 9000);
  auto words = [&](size_t i) { return ScheduledItemWords("fn", args[i], i % 3); };
  auto build = [&](size_t begin, size_t end) {
    capnp::MallocMessageBuilder message;
    auto update = message.initRoot<journal::Update>();
    auto list = update.initClosureBatch().initScheduled(static_cast<unsigned>(end - begin));
    for (size_t i = begin; i < end; ++i) {
      auto item = list[static_cast<unsigned>(i - begin)];
      item.setClosureId(i + 1);
      item.setFunctionName("fn");
      item.setArgs(kj::heapArray<kj::byte>(args[i]));
      item.initResources(static_cast<unsigned>(i % 3));
    }
    return EncodeUpdate(update.asReader()).size();
  };
  auto runs = SplitIntoRecords(args.size(), ClosureBatchOverheadWords(), kLimit, words);
  ASSERT_GT(runs.size(), 1u);
  size_t next = 0;
  for (auto [begin, end] : runs) {
    EXPECT_EQ(begin, next);
    EXPECT_LT(begin, end);
    EXPECT_LE(build(begin, end), kLimit);
    EXPECT_EQ(build(begin, end), (ClosureBatchOverheadWords() +
                                  [&] {
                                    uint64_t w = 0;
                                    for (size_t i = begin; i < end; ++i) w += words(i);
                                    return w;
                                  }()) *
                                     8);
    if (end < args.size()) {
      EXPECT_GT(build(begin, end + 1), kLimit);
    }
    next = end;
  }
  EXPECT_EQ(next, args.size());
}

TEST(RecordBudget, AnItemLargerThanARecordGetsARunOfItsOwn) {
  auto runs = SplitIntoRecords(3, 0, 80, [](size_t i) { return i == 1 ? 100 : 2; });
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1], std::make_pair(size_t{1}, size_t{2}));
  EXPECT_EQ(SplitByCount(5, 2).size(), 3u);
  EXPECT_TRUE(SplitByCount(0, 2).empty());
}

// The closure batch builders size each record's message from the budget, so
// it is one segment holding exactly the record: the bytes the dispatcher
// journals without re-encoding (UpdateList::EncodedIfOneSegment) are the
// compact encoding, byte for byte, and the budgets stay exact for them.
TEST(RecordBudget, ClosureBatchesAreBuiltAsTheirCompactRecordInOneSegment) {
  // Small records for the lists cut by bytes (finished ones are cut by count).
  const Stamp stamp{1234, kLimit};
  std::vector<std::string> args;
  std::vector<NewClosure> closures(300);
  for (size_t i = 0; i < closures.size(); ++i) args.push_back(std::string((i * 7919) % 700, 'a'));
  capnp::MallocMessageBuilder inputs_message;
  auto resources = inputs_message.initRoot<journal::ClosureScheduled>().initResources(2);
  resources.set(0, 5);
  resources.set(1, 6);
  for (size_t i = 0; i < closures.size(); ++i) {
    NewClosure& c = closures[i];
    c.closure_id = i + 1;
    c.function = "fn";
    c.args = capnp::Data::Reader(reinterpret_cast<const kj::byte*>(args[i].data()), args[i].size());
    if (i % 4 == 0) c.resources = resources.asReader();
    if (i % 5 == 1) c.inputs = {i};
    c.request_id = i % 2 == 0 ? 0 : 100 + i;
  }
  std::vector<ClosureRun> runs;
  std::vector<StoredResult> results;
  std::vector<uint64_t> ids;
  for (uint64_t i = 1; i <= 20000; ++i) {
    runs.push_back({i, 1 + i % 3, 1});
    results.push_back({{i, 1 + i % 3, 1}, i * 10, static_cast<uint32_t>(i)});
    ids.push_back(i);
  }
  UpdateList updates;
  AddScheduled(updates, stamp, 7, closures);
  AddAssigned(updates, stamp, runs);
  AddFinished(updates, stamp, results);
  AddCancelled(updates, stamp, ids);
  AddReleased(updates, stamp, ids);
  ASSERT_GT(updates.size(), 5u);
  for (size_t i = 0; i < updates.size(); ++i) {
    std::optional<std::string> own = updates.EncodedIfOneSegment(i);
    ASSERT_TRUE(own.has_value()) << "update " << i << " is not one segment";
    EXPECT_EQ(*own, EncodeUpdate(updates[i])) << "update " << i;
  }
}

}  // namespace
}  // namespace dispatch::reactor
