// The client pieces without processes: the ClosureBook's window, first error,
// releases and orphans; the ResourceCache's build-once rule; the
// ClosureExecutor's slot limit and early wake-up on Stop.
#include <capnp/message.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "clients/closure_book.h"
#include "clients/closure_executor.h"
#include "clients/resource_cache.h"
#include "tests/closures/closure_test_support.h"

namespace dispatch::testing {
namespace {

using clients::ClosureBook;
using clients::ClosureCell;
using clients::RemoteValueStatus;

std::vector<uint64_t> SequencesOf(const std::vector<ClosureBook::Outgoing>& batch) {
  std::vector<uint64_t> out;
  for (auto& c : batch) out.push_back(c.sequence);
  return out;
}

void Acknowledge(ClosureBook& book, const std::vector<ClosureBook::Outgoing>& batch,
                 uint64_t first_id) {
  capnp::MallocMessageBuilder message;
  auto results = message.initRoot<rpc::Coordinator::ScheduleResults>();
  auto ids = results.initClosureIds(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) ids.set(i, first_id + i);
  book.OnAcknowledged(SequencesOf(batch), results.asReader().getClosureIds());
}

void Outcome(ClosureBook& book, uint64_t id, rpc::ClosureState state, std::string data) {
  capnp::MallocMessageBuilder message;
  auto results = message.initRoot<rpc::Coordinator::AwaitResultsResults>();
  auto outcome = results.initResults(1)[0];
  outcome.setClosureId(id);
  outcome.setState(state);
  if (state == rpc::ClosureState::FINISHED) {
    outcome.setResult(kj::arrayPtr(reinterpret_cast<const kj::byte*>(data.data()), data.size()));
  } else {
    outcome.setError(data);
  }
  book.OnOutcomes(results.asReader().getResults());
}

TEST(ClosureBook, AFullWindowMakesAddWaitUntilAnAcknowledgement) {
  ClosureBook book(2, 100);
  auto a = book.Add("echo", "a", {});
  auto b = book.Add("echo", "b", {});
  ASSERT_TRUE(a.ok() && b.ok());
  std::atomic<bool> added{false};
  std::thread third([&] {
    auto c = book.Add("echo", "c", {});
    added = c.ok();
  });
  auto batch = book.TakeUnsent(10);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].args, "a");
  EXPECT_NE(batch[0].request_id, batch[1].request_id);
  EXPECT_FALSE(added.load()) << "Add went past a full window";
  Acknowledge(book, batch, 7);
  third.join();
  EXPECT_TRUE(added.load());
  EXPECT_EQ((*a)->closure_id, 7u);
  EXPECT_EQ(book.unacknowledged(), 1u);
}

// Issue 12: 1024 closures of 1 MiB made one schedule call of 1 GiB, past the
// dispatcher's message limit: the connection closed and the resend did the same.
TEST(ClosureBook, ScheduleCallsAreCutByBytesAsWellAsByCountInOrder) {
  ClosureBook book(100, 100);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(book.Add("f", std::string(400, 'a' + i), {}).ok());
  auto first = book.TakeUnsent(10, 1000);  // 401 bytes each: two fit
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].args[0], 'a');
  EXPECT_EQ(first[1].args[0], 'b');
  auto second = book.TakeUnsent(10, 100);  // one closure always goes, even over the bytes
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].args[0], 'c');
  auto rest = book.TakeUnsent(10, 1u << 20);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[1].args[0], 'e');
}

// Each closure goes once per session, in order, whatever mix of sends,
// acknowledgements and new closures comes between.
TEST(ClosureBook, EveryUnacknowledgedClosureGoesOncePerSessionInOrder) {
  ClosureBook book(100, 100);
  auto add = [&book](int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(book.Add("f", "x", {}).ok());
  };
  add(5);
  EXPECT_TRUE(book.has_unsent());
  auto first = book.TakeUnsent(3);
  EXPECT_EQ(SequencesOf(first), (std::vector<uint64_t>{1, 2, 3}));
  Acknowledge(book, {first[0]}, 100);  // 1 is acknowledged; 2 and 3 are in flight
  add(2);
  auto second = book.TakeUnsent(10);
  EXPECT_EQ(SequencesOf(second), (std::vector<uint64_t>{4, 5, 6, 7}));
  EXPECT_FALSE(book.has_unsent());
  EXPECT_TRUE(book.TakeUnsent(10).empty()) << "sent twice in one session";
  Acknowledge(book, {second[3]}, 107);  // 7 is acknowledged out of order
  book.OnSessionStart();
  EXPECT_TRUE(book.has_unsent());
  auto again = book.TakeUnsent(10);
  EXPECT_EQ(SequencesOf(again), (std::vector<uint64_t>{2, 3, 4, 5, 6}));
  add(1);
  EXPECT_EQ(SequencesOf(book.TakeUnsent(10)), (std::vector<uint64_t>{8}));
  EXPECT_FALSE(book.has_unsent());
}

TEST(ClosureBook, ANewSessionResendsUnacknowledgedClosuresWithTheirRequestIds) {
  ClosureBook book(10, 100);
  ASSERT_TRUE(book.Add("echo", "a", {}).ok());
  auto first = book.TakeUnsent(10);
  EXPECT_TRUE(book.TakeUnsent(10).empty()) << "sent twice in one session";
  book.OnSessionStart();
  auto again = book.TakeUnsent(10);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].request_id, first[0].request_id);
}

TEST(ClosureBook, ARefusedScheduleCancelsItsClosuresAndTheErrorIsTakenOnce) {
  ClosureBook book(10, 100);
  auto a = book.Add("echo", "a", {});
  auto batch = book.TakeUnsent(10);
  book.OnRefused(SequencesOf(batch), CancelledError("not scheduled"),
                 clients::ClosureFailedError(3, "boom"));
  EXPECT_EQ((*a)->status, RemoteValueStatus::kCancelled);
  Status first = book.TakeError();
  EXPECT_EQ(first.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(first.message(), "closure 3 failed: boom");
  EXPECT_TRUE(book.TakeError().ok());
}

TEST(ClosureBook, AFetchReleasesTheClosureOnceAndLaterCopiesAreIgnored) {
  auto book = std::make_shared<ClosureBook>(10, 100);
  auto cell = book->Add("echo", "a", {});
  Acknowledge(*book, book->TakeUnsent(10), 41);
  Outcome(*book, 41, rpc::ClosureState::FINISHED, "result");
  clients::RemoteValue value(book, *cell);
  EXPECT_EQ(value.status(), RemoteValueStatus::kReady);
  EXPECT_EQ(*value.Fetch(), "result");
  EXPECT_EQ(*value.Fetch(), "result");
  EXPECT_EQ(book->TakeReleases(), std::vector<uint64_t>{41});
  // A new session re-sends it before the release went through: ignored.
  book->OnSessionStart();
  Outcome(*book, 41, rpc::ClosureState::FINISHED, "result");
  EXPECT_EQ(book->TakeReleases(), std::vector<uint64_t>{41});
  book->OnReleased({41});
  EXPECT_TRUE(book->TakeReleases().empty());
}

TEST(ClosureBook, AnOutcomeOfADroppedRemoteValueIsReleasedAtOnce) {
  ClosureBook book(10, 100);
  {
    auto cell = book.Add("echo", "a", {});
    Acknowledge(book, book.TakeUnsent(10), 5);
  }
  Outcome(book, 5, rpc::ClosureState::FINISHED, "nobody wants me");
  EXPECT_EQ(book.TakeReleases(), std::vector<uint64_t>{5});
}

TEST(ClosureBook, AnOutcomeOfAnEarlierProcessWaitsForAttach) {
  ClosureBook book(10, 100);
  Outcome(book, 9, rpc::ClosureState::FAILED, "old failure");
  EXPECT_TRUE(book.TakeFailureHint());
  EXPECT_FALSE(book.TakeFailureHint());
  bool lookup = true;
  auto cell = book.Attach(9, &lookup);
  EXPECT_FALSE(lookup) << "its outcome is here already";
  EXPECT_EQ(cell->status, RemoteValueStatus::kFailed);
  EXPECT_EQ(cell->error.message(), "closure 9 failed: old failure");
  auto unknown = book.Attach(10, &lookup);
  EXPECT_TRUE(lookup);
  book.OnUnknown(10, NotFoundError("closure 10 is unknown"));
  EXPECT_EQ(unknown->status, RemoteValueStatus::kFailed);
  EXPECT_EQ(unknown->error.code(), StatusCode::kNotFound);
}

TEST(ClosureBook, CloseEndsEveryWait) {
  auto book = std::make_shared<ClosureBook>(1, 100);
  auto cell = book->Add("echo", "a", {});
  auto fetch =
      std::async(std::launch::async, [&] { return clients::RemoteValue(book, *cell).Fetch(); });
  auto add = std::async(std::launch::async, [&] { return book->Add("echo", "b", {}).status(); });
  book->Close();
  EXPECT_EQ(fetch.get().status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(add.get().code(), StatusCode::kUnavailable);
}

TEST(ResourceCache, ConcurrentUsersBuildAComponentOnceAndAFailureIsNotCached) {
  clients::ResourceCache cache;
  EXPECT_EQ(cache.Get(1, nullptr).status().code(), StatusCode::kNotFound);
  cache.AddSpec(1, {"make", "x"});
  std::atomic<int> builds{0};
  auto build = [&](uint64_t, const clients::ResourceCache::Spec& spec) -> Result<std::string> {
    ++builds;
    return spec.args + "!";
  };
  std::vector<std::thread> users;
  for (int i = 0; i < 8; ++i) {
    users.emplace_back([&] { EXPECT_EQ(*cache.Get(1, build), "x!"); });
  }
  for (auto& t : users) t.join();
  EXPECT_EQ(builds.load(), 1);
  cache.AddSpec(2, {"make", "y"});
  auto failing = [](uint64_t, const clients::ResourceCache::Spec&) -> Result<std::string> {
    return FailedPreconditionError("no");
  };
  EXPECT_FALSE(cache.Get(2, failing).ok());
  EXPECT_FALSE(cache.IsBuilt(2));
  EXPECT_EQ(*cache.Get(2, build), "y!");
}

TEST(ClosureExecutor, RunsAtMostItsThreadsAtOnceAndStopWakesSleepers) {
  clients::ClosureExecutor executor(2);
  std::atomic<int> running{0}, most{0}, finished{0};
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  for (int i = 0; i < 6; ++i) {
    executor.Submit([&] {
      int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      open.wait();
      --running;
      ++finished;
    });
  }
  EXPECT_TRUE(WaitUntil([&] { return running.load() == 2; }));
  gate.set_value();
  EXPECT_TRUE(WaitUntil([&] { return finished.load() == 6; }));
  EXPECT_EQ(most.load(), 2);
  std::atomic<bool> sleeping{false}, woke_early{false};
  executor.Submit([&] {
    sleeping = true;
    woke_early = !executor.SleepFor(std::chrono::hours(1));
  });
  EXPECT_TRUE(WaitUntil([&] { return sleeping.load(); }));
  executor.Stop();
  EXPECT_TRUE(woke_early.load());
  EXPECT_FALSE(executor.Submit([] {}));
}

}  // namespace
}  // namespace dispatch::testing
