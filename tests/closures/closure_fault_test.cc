// Failures: a worker killed -9 mid-closure leaves the closure to another
// worker; a dispatcher killed -9 with 1,000 closures scheduled completes them
// all after a restart and every Fetch returns its own result; a new
// Coordinator opening the same coordinator id fetches closures an earlier one
// scheduled; back-pressure at a small queue bound makes Schedule wait and
// then proceed.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/closures/closure_test_support.h"

namespace dispatch::testing {
namespace {

using clients::RemoteValue;
using clients::RemoteValueStatus;

TEST(ClosureFaults, AWorkerKilledMidClosureLeavesItToAnotherWorker) {
  ClosureDispatcher dispatcher;
  auto doomed = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto value = coordinator->Schedule("sleep", "1500");
  ASSERT_TRUE(value.ok());
  ASSERT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.assigned == 1;
  })) << "the closure never started";
  doomed->Kill9();
  auto rescuer = StartClosureWorker(dispatcher.address());
  EXPECT_EQ(FetchOrDie(*value), rescuer->address()) << "the result must come from the rescuer";
  EXPECT_GE(GetClosureCounters(dispatcher.address()).put_back, 1u);
  EXPECT_TRUE(coordinator->Join().ok());
}

TEST(ClosureFaults, ADispatcherKilledWithAThousandClosuresScheduledCompletesThemAllAfterRestart) {
  constexpr int kClosures = 1000;
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<RemoteValue> values;
  for (int i = 0; i < kClosures; ++i) {
    auto value = coordinator->Schedule("echo", "result " + std::to_string(i));
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    values.push_back(*value);
  }
  ASSERT_TRUE(WaitUntil([&] {
    for (auto& v : values) {
      if (v.closure_id() == 0) return false;
    }
    return true;
  })) << "not every schedule was acknowledged";
  // Some finish (results held, unfetched) before the kill; the rest stay queued.
  auto first_worker = StartClosureWorker(dispatcher.address());
  ASSERT_TRUE(WaitUntil([&] {
    int ready = 0;
    for (auto& v : values) ready += v.status() == RemoteValueStatus::kReady;
    return ready >= 1;
  }));
  dispatcher.Kill9();
  dispatcher.Start();
  auto second_worker = StartClosureWorker(dispatcher.address());
  for (int i = 0; i < kClosures; ++i) {
    EXPECT_EQ(FetchOrDie(values[i]), "result " + std::to_string(i));
  }
  EXPECT_TRUE(coordinator->Join().ok());
  EXPECT_TRUE(WaitUntil([&] { return coordinator->status().dispatcher_restarts >= 1; }));
}

TEST(ClosureFaults, ClosuresRunningWhenTheDispatcherDiesArePutBackAndCountedAtRestart) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto value = coordinator->Schedule("sleep", "300");
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  ASSERT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.assigned == 1;
  })) << "the closure never started";
  dispatcher.Kill9();
  dispatcher.Start();
  // The recovery put it back in the queue; the counter says so.
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.put_back >= 1;
  })) << "the recovered closure was put back without being counted";
  EXPECT_EQ(FetchOrDie(*value), worker->address());
}

TEST(ClosureFaults, SchedulesInFlightDuringADispatcherKillAreNeitherLostNorDoubled) {
  constexpr int kClosures = 1000;
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 4);
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<RemoteValue> values;
  for (int i = 0; i < kClosures; ++i) {
    if (i == kClosures / 2) {
      dispatcher.Kill9();
      dispatcher.Start();
    }
    auto value = coordinator->Schedule("echo", std::to_string(i));
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    values.push_back(*value);
  }
  for (int i = 0; i < kClosures; ++i) EXPECT_EQ(FetchOrDie(values[i]), std::to_string(i));
  EXPECT_TRUE(coordinator->Join().ok());
  ClosureCounters after = GetClosureCounters(dispatcher.address());
  EXPECT_LE(after.scheduled_total, static_cast<uint64_t>(kClosures))
      << "a resent schedule was queued twice";
}

TEST(ClosureFaults, ANewCoordinatorWithTheSameIdFetchesClosuresOfAnEarlierOne) {
  ClosureDispatcher dispatcher;
  const uint64_t id = 0x5eed0001;
  std::vector<uint64_t> ids;
  {
    auto options = CoordinatorOf(dispatcher.address(), id);
    options.seed = 42;  // the same seed in both: request ids must still differ
    auto first = MakeCoordinator(options);
    for (int i = 0; i < 10; ++i) {
      auto value = first->Schedule("echo", "from the first " + std::to_string(i));
      ASSERT_TRUE(value.ok());
      ASSERT_TRUE(WaitUntil([&] { return value->closure_id() != 0; }));
      ids.push_back(value->closure_id());
    }
  }  // the first coordinator is gone before any closure ran
  auto worker = StartClosureWorker(dispatcher.address());
  auto second_options = CoordinatorOf(dispatcher.address(), id);
  second_options.seed = 42;
  auto second = MakeCoordinator(second_options);
  EXPECT_EQ(second->id(), id);
  EXPECT_TRUE(second->Join().ok()) << "Join covers the earlier coordinator's closures";
  for (int i = 0; i < 10; ++i) {
    RemoteValue value = second->Attach(ids[i]);
    EXPECT_EQ(FetchOrDie(value), "from the first " + std::to_string(i));
    EXPECT_EQ(value.closure_id(), ids[i]);
  }
  auto own = second->Schedule("echo", "from the second");
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(FetchOrDie(*own), "from the second") << "taken for a retry of the first's schedule";
}

TEST(ClosureFaults, ScheduleWaitsAtAFullQueueAndProceedsWhenItDrains) {
  constexpr int kClosures = 60;
  ClosureDispatcher dispatcher({MaxQueuedClosuresFlag(10)});
  auto options = CoordinatorOf(dispatcher.address());
  options.max_unacknowledged = 20;
  options.max_schedule_batch = 5;
  auto coordinator = MakeCoordinator(options);
  std::atomic<int> scheduled{0};
  std::vector<RemoteValue> values(kClosures);
  std::thread scheduler([&] {
    for (int i = 0; i < kClosures; ++i) {
      auto value = coordinator->Schedule("echo", std::to_string(i));
      if (!value.ok()) return;
      values[i] = *value;
      ++scheduled;
    }
  });
  // No worker: the queue fills towards its bound, the client window fills
  // behind it, and Schedule waits instead of failing or growing. A batch is
  // admitted whole or waits, and the client sends batches of up to 5 as its
  // flushes fall: the first that does not fit leaves the queue between 6 and
  // 10, and waits (with every batch after it).
  ClosureCounters last;
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [&](const ClosureCounters& c) {
    last = c;
    return c.queued > 10 - 5 && c.queued <= 10 && c.schedule_waits >= 1;
  })) << "last seen: queued " << last.queued << ", schedule waits " << last.schedule_waits
      << ", scheduled total " << last.scheduled_total << "; Schedule returned " << scheduled.load()
      << " times";
  EXPECT_TRUE(WaitUntil([&] { return scheduled.load() >= 20; }))
      << "Schedule returned " << scheduled.load() << " times";
  EXPECT_LT(scheduled.load(), kClosures) << "Schedule did not wait at a full queue";
  EXPECT_LE(GetClosureCounters(dispatcher.address()).queued, 10u);
  auto worker = StartClosureWorker(dispatcher.address());
  scheduler.join();
  ASSERT_EQ(scheduled.load(), kClosures);
  for (int i = 0; i < kClosures; ++i) EXPECT_EQ(FetchOrDie(values[i]), std::to_string(i));
  EXPECT_TRUE(coordinator->Join().ok());
}

}  // namespace
}  // namespace dispatch::testing
