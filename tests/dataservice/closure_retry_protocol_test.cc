// Retries at the protocol level, against the real dispatcher: a schedule or
// resource creation sent again after a lost reply (same request ids), also
// under a pending first error, a late copy of a schedule the first error
// refused, and a worker that reattaches on a new connection before its old
// one is seen to end. Several were found by the simulation (tests/sim).
#include <gtest/gtest.h>

#include <array>

#include "tests/dataservice/closure_protocol_peers.h"

namespace dispatch::testing {
namespace {

TEST(ClosureProtocol, RetriedScheduleWithSameRequestIdsQueuesNothingNew) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  Coordinator coordinator(loop, dispatcher.address(), 11);
  auto first = coordinator.Schedule({"noop", "noop"}, 100);
  auto again = coordinator.Schedule({"noop", "noop"}, 100);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->ids, again->ids);
  auto outcomes = coordinator.Outcomes(first->ids);
  ASSERT_TRUE(outcomes.ok());
  EXPECT_EQ(outcomes->size(), 2u);
  EXPECT_FALSE(coordinator.Outcomes({first->ids[1] + 1}).ok());
}

TEST(ClosureProtocol, AScheduleRetriedUnderAPendingFirstErrorGetsItsIdsAndTheErrorWaits) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  ClosureWorker worker(loop, dispatcher.address(), "w", 1);
  ASSERT_TRUE(worker.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 12);
  auto failing = coordinator.Schedule({"fail"});
  ASSERT_TRUE(failing.ok());
  ASSERT_TRUE(worker.WaitForPushes(1));
  auto first = coordinator.Schedule({"noop", "noop"}, 200);  // queued: the one slot is taken
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->ids.size(), 2u);
  EXPECT_EQ(*worker.Report(failing->ids[0], 1, "", "boom"), 0u);  // cancels the queued two

  // The retry of the call whose reply "was lost": its ids, not the error; a
  // closure of it that is new is scheduled and cancelled at once.
  auto retry = coordinator.Schedule({"noop", "noop", "noop"}, 200);
  ASSERT_TRUE(retry.ok());
  EXPECT_TRUE(retry->error.empty()) << retry->error;
  ASSERT_EQ(retry->ids.size(), 3u);
  EXPECT_EQ(retry->ids[0], first->ids[0]);
  EXPECT_EQ(retry->ids[1], first->ids[1]);
  auto outcomes = coordinator.Outcomes(retry->ids);
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  for (const Outcome& o : *outcomes) EXPECT_EQ(o.state, rpc::ClosureState::CANCELLED);
  // The error is raised by the next call that is not such a retry.
  auto raised = coordinator.Schedule({"noop"});
  ASSERT_TRUE(raised.ok());
  EXPECT_EQ(raised->error, "boom");
  EXPECT_TRUE(raised->ids.empty());
}

TEST(ClosureProtocol, ALateCopyOfARefusedScheduleGetsTheSameRefusalAndQueuesNothing) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  ClosureWorker worker(loop, dispatcher.address(), "w", 1);
  ASSERT_TRUE(worker.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 14);
  auto failing = coordinator.Schedule({"fail"});
  ASSERT_TRUE(failing.ok());
  ASSERT_TRUE(worker.WaitForPushes(1));
  EXPECT_EQ(*worker.Report(failing->ids[0], 1, "", "boom"), 0u);
  DsClient admin(loop, dispatcher.address());
  auto stats = [&] {
    return Try(loop, admin.dispatcher().getClosureStatsRequest().send().then([](auto r) {
      return std::array<uint64_t, 3>{r.getStats().getFailed(), r.getStats().getScheduledTotal(),
                                     r.getStats().getRefusalsRepeated()};
    }));
  };
  ASSERT_TRUE(WaitUntil([&] { return stats().ok() && (*stats())[0] == 1; }, loop));

  auto refused = coordinator.Schedule({"noop", "noop"}, 300);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->error, "boom");
  EXPECT_TRUE(refused->ids.empty());
  // The copy, on another session as a late one would be: refused alike, even
  // though the error itself was cleared by the first refusal.
  Coordinator late_connection(loop, dispatcher.address(), 14);
  auto copy = late_connection.Schedule({"noop", "noop"}, 300);
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy->error, "boom");
  EXPECT_TRUE(copy->ids.empty());
  auto counters = stats();
  ASSERT_TRUE(counters.ok());
  EXPECT_EQ((*counters)[1], 1u) << "the copy queued closures";
  EXPECT_EQ((*counters)[2], 1u);
  // A call with new request ids is not refused: the error was raised once.
  auto next = coordinator.Schedule({"noop"}, 400);
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->error.empty()) << next->error;
  EXPECT_EQ(next->ids.size(), 1u);
}

TEST(ClosureProtocol, AWorkerReattachingOnANewConnectionGetsItsOldConnectionsClosuresAgain) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  ClosureWorker old_link(loop, dispatcher.address(), "w", 1);
  ASSERT_TRUE(old_link.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 13);
  auto scheduled = coordinator.Schedule({"noop"});
  ASSERT_TRUE(scheduled.ok());
  ASSERT_TRUE(old_link.WaitForPushes(1));
  // The same process (same address and incarnation) on a new connection; the
  // old one is still open, as far as the dispatcher can tell.
  ClosureWorker new_link(loop, dispatcher.address(), "w", 1);
  ASSERT_TRUE(new_link.Heartbeat().ok());
  EXPECT_EQ(new_link.worker_id(), old_link.worker_id());
  ASSERT_TRUE(new_link.WaitForPushes(1));
  EXPECT_EQ(new_link.pushed().front().closure_id, scheduled->ids[0]);
  EXPECT_EQ(new_link.pushed().front().attempt, 2u);
  EXPECT_EQ(*new_link.Report(scheduled->ids[0], 1, "from the old link"), 1u);  // fenced
  EXPECT_EQ(*new_link.Report(scheduled->ids[0], 2, "done"), 0u);
  auto outcomes = coordinator.Await();
  ASSERT_TRUE(outcomes.ok());
  ASSERT_EQ(outcomes->size(), 1u);
  EXPECT_EQ((*outcomes)[0].result, "done");
}

TEST(ClosureProtocol, RetriedResourceCreationWithTheSameRequestIdIsTheSameResource) {
  TempDir dir;
  uint64_t first = 0;
  {
    DispatcherProcess dispatcher({.work_dir = dir.path()});
    ClientLoop loop;
    Coordinator coordinator(loop, dispatcher.address(), 31);
    auto created = coordinator.CreateResource("make_resource", 500);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    first = *created;
    auto again = coordinator.CreateResource("make_resource", 500);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, first);
    // The key names that resource: reusing it for another one is refused.
    auto other = coordinator.CreateResource("log_resource", 500);
    ASSERT_FALSE(other.ok());
    EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument) << other.status().ToString();
    // Another key, or another coordinator with the same key, is a new resource.
    auto second = coordinator.CreateResource("make_resource", 501);
    ASSERT_TRUE(second.ok());
    EXPECT_NE(*second, first);
    Coordinator stranger(loop, dispatcher.address(), 32);
    auto theirs = stranger.CreateResource("make_resource", 500);
    ASSERT_TRUE(theirs.ok());
    EXPECT_NE(*theirs, first);
    dispatcher.process().Signal(SIGKILL);
    dispatcher.process().Wait(std::chrono::seconds(10));
  }
  // The key is journaled: a retry that reaches a restarted dispatcher too.
  DispatcherProcess restarted({.work_dir = dir.path()});
  ClientLoop loop;
  Coordinator coordinator(loop, restarted.address(), 31);
  auto retried = coordinator.CreateResource("make_resource", 500);
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_EQ(*retried, first);
}

}  // namespace
}  // namespace dispatch::testing
