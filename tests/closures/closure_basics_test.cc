// Schedule / Fetch / Join / Done with real dispatch-worker processes: results
// come back to Fetch, RemoteValue reports its status without blocking, many
// coordinators on one dispatcher see only their own closures, and bad input
// gets a clear error.
#include <gtest/gtest.h>

#include <set>

#include "tests/closures/closure_test_support.h"

namespace dispatch::testing {
namespace {

using clients::RemoteValue;
using clients::RemoteValueStatus;

TEST(Closures, EveryScheduledClosureReturnsItsOwnResultToFetch) {
  ClosureDispatcher dispatcher;
  auto a = StartClosureWorker(dispatcher.address(), 2);
  auto b = StartClosureWorker(dispatcher.address(), 2);
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<RemoteValue> values;
  for (int i = 0; i < 200; ++i) {
    auto value = coordinator->Schedule("echo", "value " + std::to_string(i));
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    values.push_back(*value);
  }
  for (int i = 0; i < 200; ++i) EXPECT_EQ(FetchOrDie(values[i]), "value " + std::to_string(i));
  EXPECT_TRUE(coordinator->Join().ok());
  auto done = coordinator->Done();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(*done);
  std::set<uint64_t> ids;
  for (auto& value : values) ids.insert(value.closure_id());
  EXPECT_EQ(ids.size(), values.size()) << "closure ids repeat";
  EXPECT_EQ(ids.count(0), 0u);
}

TEST(Closures, FetchedClosuresAreReleasedAtTheDispatcher) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 4);
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<RemoteValue> values;
  for (int i = 0; i < 100; ++i) values.push_back(*coordinator->Schedule("echo", "x"));
  for (auto& value : values) EXPECT_EQ(FetchOrDie(value), "x");
  // Releases ride on the next awaitResults, which follows the next outcome at
  // the latest.
  auto next = coordinator->Schedule("echo", "y");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(FetchOrDie(*next), "y");
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.released_total >= 100 && c.finished <= 1;
  })) << "fetched results stay held at the dispatcher";
}

TEST(Closures, AClosingCoordinatorReleasesWhatItFetched) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 4);
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<RemoteValue> values;
  for (int i = 0; i < 50; ++i) values.push_back(*coordinator->Schedule("echo", "x"));
  ASSERT_TRUE(coordinator->Join().ok());
  for (auto& value : values) EXPECT_EQ(FetchOrDie(value), "x");
  coordinator->Close();
  // Releases are journaled with the dispatcher's next commit (at most a few
  // milliseconds later): wait for them.
  ClosureCounters after;
  EXPECT_TRUE(WaitUntil([&] {
    after = GetClosureCounters(dispatcher.address());
    return after.released_total == 50u && after.finished == 0u;
  })) << "released "
      << after.released_total << ", still held " << after.finished;
}

TEST(Closures, RemoteValueReportsPendingThenReadyWithoutBlocking) {
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  // No worker yet: the closure stays pending, and status() answers at once.
  auto value = coordinator->Schedule("echo", "late");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(value->status(), RemoteValueStatus::kPending);
  EXPECT_TRUE(WaitUntil([&] { return value->closure_id() != 0; }));
  auto done = coordinator->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done) << "a queued closure counts as not done";
  EXPECT_EQ(value->status(), RemoteValueStatus::kPending);

  auto worker = StartClosureWorker(dispatcher.address());
  EXPECT_TRUE(WaitUntil([&] { return value->status() == RemoteValueStatus::kReady; }));
  EXPECT_EQ(FetchOrDie(*value), "late");
  EXPECT_EQ(value->status(), RemoteValueStatus::kReady) << "a fetched value stays ready";
  EXPECT_EQ(FetchOrDie(*value), "late") << "a second Fetch returns the same result";
}

TEST(Closures, JoinWaitsForRunningClosuresAndDoneTellsWithoutWaiting) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto slow = coordinator->Schedule("sleep", "500");
  ASSERT_TRUE(slow.ok());
  auto done = coordinator->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done);
  ASSERT_TRUE(coordinator->Join().ok());
  EXPECT_EQ(slow->status(), RemoteValueStatus::kReady) << "Join returned before the closure ended";
  done = coordinator->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  EXPECT_EQ(FetchOrDie(*slow), worker->address());
}

// The same with results the dispatcher reads back on its thread pool (a
// reply of 64 KiB or more of stored results): the join's "done" still comes
// after the reply that reports them, so every value is ready once Join
// returns.
TEST(Closures, JoinReturnsAfterTheOutcomesOfResultsReadOffTheLoop) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 4);
  auto coordinator = MakeCoordinator(dispatcher.address());
  for (int round = 0; round < 5; ++round) {
    std::vector<RemoteValue> values;
    for (int i = 0; i < 8; ++i) {
      auto value = coordinator->Schedule("bytes", std::to_string(300 << 10) + ":" + std::to_string(i));
      ASSERT_TRUE(value.ok());
      values.push_back(*value);
    }
    ASSERT_TRUE(coordinator->Join().ok());
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(values[i].status(), RemoteValueStatus::kReady)
          << "round " << round << ": Join returned before the outcome of value " << i;
    }
  }
}

TEST(Closures, ManyCoordinatorsOnOneDispatcherSeeOnlyTheirOwnClosures) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 4);
  auto busy = MakeCoordinator(dispatcher.address());
  auto quick = MakeCoordinator(dispatcher.address());
  auto failing = MakeCoordinator(dispatcher.address());
  ASSERT_NE(busy->id(), quick->id());
  auto long_running = busy->Schedule("sleep", "3000");
  ASSERT_TRUE(long_running.ok());
  auto boom = failing->Schedule("fail", "only mine");
  ASSERT_TRUE(boom.ok());
  EXPECT_FALSE(boom->FetchFor(kFetchDeadline).ok());

  std::vector<RemoteValue> values;
  for (int i = 0; i < 20; ++i) values.push_back(*quick->Schedule("echo", std::to_string(i)));
  // Join of `quick` neither waits for `busy`'s sleep nor sees `failing`'s error.
  EXPECT_TRUE(quick->Join().ok());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(FetchOrDie(values[i]), std::to_string(i));
  auto quick_done = quick->Done();
  ASSERT_TRUE(quick_done.ok());
  EXPECT_TRUE(*quick_done);
  auto busy_done = busy->Done();
  ASSERT_TRUE(busy_done.ok()) << "another coordinator's error leaked: "
                              << busy_done.status().ToString();
  EXPECT_FALSE(*busy_done);
  EXPECT_EQ(long_running->status(), RemoteValueStatus::kPending);
  // Another coordinator cannot attach to it.
  auto stranger = quick->Attach(long_running->closure_id());
  EXPECT_EQ(stranger.FetchFor(kFetchDeadline).status().code(), StatusCode::kNotFound);
  Status failing_join = failing->Join();
  EXPECT_FALSE(failing_join.ok());
  EXPECT_NE(failing_join.message().find("only mine"), std::string::npos) << failing_join.ToString();
}

TEST(Closures, BadInputGetsAClearErrorAndChangesNothing) {
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto empty = coordinator->Schedule("", "x");
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  auto unknown = coordinator->Attach(987654321);
  auto fetched = unknown.FetchFor(kFetchDeadline);
  EXPECT_EQ(fetched.status().code(), StatusCode::kNotFound) << fetched.status().ToString();
  EXPECT_EQ(unknown.status(), RemoteValueStatus::kFailed);
  EXPECT_EQ(clients::RemoteValue().status(), RemoteValueStatus::kCancelled);
  EXPECT_FALSE(clients::RemoteValue().Fetch().ok());

  auto bad_address = clients::Coordinator::Create(CoordinatorOf("tcp:nowhere"));
  EXPECT_EQ(bad_address.status().code(), StatusCode::kInvalidArgument);
  auto options = CoordinatorOf(dispatcher.address());
  options.max_unacknowledged = 0;
  EXPECT_EQ(clients::Coordinator::Create(options).status().code(), StatusCode::kInvalidArgument);
  auto done = coordinator->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
}

TEST(Closures, ACoordinatorWithAWrongTokenIsRefusedAtOnce) {
  ClosureDispatcher dispatcher({"--token=let-me-in"});
  auto options = CoordinatorOf(dispatcher.address());
  options.token = "guess";
  auto refused = clients::Coordinator::Create(options);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnauthenticated) << refused.status().ToString();
  options.token = "let-me-in";
  auto admitted = clients::Coordinator::Create(options);
  EXPECT_TRUE(admitted.ok()) << admitted.status().ToString();
}

// Issue 14: such a closure was pushed to a worker without the function and
// failed as a user error, cancelling the coordinator's queue. Now it waits
// for a worker that registers the function (tests/closures/closure_routing_test.cc).
TEST(Closures, AFunctionNoWorkerRegisteredWaitsInsteadOfFailing) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto value = coordinator->Schedule("no_such_function", "");
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.queued_without_worker == 1;
  }));
  auto after = coordinator->Schedule("echo", "unaffected");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(FetchOrDie(*after), "unaffected");
  EXPECT_EQ(value->status(), RemoteValueStatus::kPending);
  EXPECT_EQ(GetClosureCounters(dispatcher.address()).queued, 1u);
}

// Issue 12: 1024 closures of 1 MiB went out as one schedule call of 1 GiB,
// past the dispatcher's message limit (connection closed, resent, closed
// again); 20 of them in one call made the dispatcher exit 3. The Coordinator
// now cuts its calls by bytes, the dispatcher its records, and a closure no
// record can hold is refused at Schedule without touching the others.
TEST(Closures, LargeClosuresAllRunAndOneTooLargeForARecordIsRefusedAlone) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 4);
  auto coordinator = MakeCoordinator(dispatcher.address());
  const std::string mib(1u << 20, 'x');
  std::vector<RemoteValue> values;
  for (int i = 0; i < 70; ++i) {
    auto value = coordinator->Schedule("noop", mib);
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    values.push_back(*value);
    if (i == 30) {
      auto huge = coordinator->Schedule("noop", std::string(17u << 20, 'y'));
      ASSERT_FALSE(huge.ok());
      EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status().ToString();
      EXPECT_NE(huge.status().message().find("max_closure_bytes"), std::string::npos);
    }
  }
  for (auto& value : values) EXPECT_EQ(FetchOrDie(value), "");
  EXPECT_TRUE(coordinator->Join().ok());
  EXPECT_EQ(GetClosureCounters(dispatcher.address()).scheduled_total, 70u);
  EXPECT_TRUE(dispatcher.process().process().running());
}

}  // namespace
}  // namespace dispatch::testing
