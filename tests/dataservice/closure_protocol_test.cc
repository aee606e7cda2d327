// Closure coordination at the protocol level, against the real dispatcher: a
// test-side worker speaks WorkerControl.runClosures / reportClosures directly
// so that the fencing rules can be driven exactly (a stale attempt, a repeated
// report, a report after the worker was removed), plus back-pressure, the
// first error, attempts running out, and outcomes surviving kill -9.
// (tests/closures drives the same rules with real dispatch-worker processes.)
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <iterator>
#include <memory>
#include <tuple>

#include "common/closure_limits.h"
#include "storage/result_file.h"
#include "tests/dataservice/closure_protocol_peers.h"

namespace dispatch::testing {
namespace {

// The result files in the dispatcher's results/ (storage's own listing).
size_t ResultFileCount(DispatcherProcess& dispatcher) {
  auto listing = storage::ListResultFiles(dispatcher.work_dir() + "/" + storage::kResultDirName);
  EXPECT_TRUE(listing.ok()) << listing.status().ToString();
  return listing.ok() ? listing->files.size() : 0;
}

// A result of --result-file-bytes or more is written to its file before its
// finish is journaled. A second report of the same run sent right behind the
// first (so it arrives while the file may still be written) is ignored, and
// the first one's bytes are what is stored: never two writers of one file.
TEST(ClosureProtocol, ARepeatedLargeReportIsIgnoredAndTheFirstOneIsStored) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  ClosureWorker worker(loop, dispatcher.address(), "w1", 1);
  ASSERT_TRUE(worker.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 43);
  auto scheduled = coordinator.Schedule({"echo"});
  ASSERT_TRUE(scheduled.ok()) << scheduled.status().ToString();
  ASSERT_TRUE(worker.WaitForPushes(1));
  const Pushed pushed = worker.pushed().front();
  const std::string first(3u << 20, 'f');
  const std::string second(3u << 20, 's');
  auto a = worker.SendReport(pushed.closure_id, pushed.attempt, first);
  auto b = worker.SendReport(pushed.closure_id, pushed.attempt, second);
  auto ignored = Try(loop, a.then([b = kj::mv(b)](uint32_t x) mutable {
    return b.then([x](uint32_t y) { return std::make_pair(x, y); });
  }));
  ASSERT_TRUE(ignored.ok()) << ignored.status().ToString();
  EXPECT_EQ(ignored->first, 0u);
  EXPECT_EQ(ignored->second, 1u);
  auto outcomes = coordinator.Outcomes({pushed.closure_id});
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  ASSERT_EQ(outcomes->size(), 1u);
  EXPECT_EQ((*outcomes)[0].state, rpc::ClosureState::FINISHED);
  EXPECT_TRUE((*outcomes)[0].result == first) << "the stored result is not the first report's";
  EXPECT_EQ(ResultFileCount(dispatcher), 1u);
}

// A closure cancelled while its large result is written: whichever comes
// first, the outcome and the files agree. Cancelled: the report is ignored
// and its file removed. Finished first: its file holds the bytes until the
// closure is released. Never a file that no closure holds.
TEST(ClosureProtocol, ACancelRacingALargeResultLeavesNoFileBehind) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  ClosureWorker worker(loop, dispatcher.address(), "w1", 1);
  ASSERT_TRUE(worker.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 44);
  const std::string result(4u << 20, 'r');
  const std::string results = dispatcher.work_dir() + "/results/";
  std::vector<uint64_t> release;
  std::string previous_file;
  for (int round = 0; round < 5; ++round) {
    auto scheduled = coordinator.Schedule({"echo"});
    ASSERT_TRUE(scheduled.ok()) << scheduled.status().ToString();
    ASSERT_TRUE(worker.WaitForPushes(round + 1));
    const Pushed pushed = worker.pushed().back();
    const std::string file = results + storage::ResultFileName(pushed.closure_id, pushed.attempt);
    auto report = worker.SendReport(pushed.closure_id, pushed.attempt, result);
    auto cancelled = coordinator.Cancel({pushed.closure_id});
    ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
    auto ignored = Try(loop, kj::mv(report));
    ASSERT_TRUE(ignored.ok()) << ignored.status().ToString();
    // This round's outcome; the last round's closure is released with it.
    auto outcomes = coordinator.Await(release);
    ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
    ASSERT_EQ(outcomes->size(), 1u);
    const Outcome& outcome = (*outcomes)[0];
    std::printf("round %d: %s\n", round, *ignored == 1u ? "the cancel came first" : "the result came first");
    if (*ignored == 1u) {
      EXPECT_EQ(outcome.state, rpc::ClosureState::CANCELLED) << "round " << round;
      EXPECT_TRUE(WaitUntil([&]() { return !std::filesystem::exists(file); }, loop))
          << "round " << round << ": the ignored report's file was not removed";
    } else {
      EXPECT_EQ(outcome.state, rpc::ClosureState::FINISHED) << "round " << round;
      EXPECT_TRUE(outcome.result == result) << "round " << round;
      EXPECT_TRUE(std::filesystem::exists(file)) << "round " << round;
    }
    if (!previous_file.empty()) {
      EXPECT_TRUE(WaitUntil([&]() { return !std::filesystem::exists(previous_file); }, loop))
          << "round " << round << ": a released result's file outlived its release";
    }
    release = {pushed.closure_id};
    previous_file = file;
  }
  EXPECT_EQ(ResultFileCount(dispatcher), std::filesystem::exists(previous_file) ? 1u : 0u)
      << "a file no closure holds";
}

TEST(ClosureProtocol, ResultIsAcceptedOnceAndStaleOrRepeatedReportsAreIgnoredAndCounted) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient admin(loop, dispatcher.address());
  ClosureWorker worker(loop, dispatcher.address(), "w1", 4);
  ASSERT_TRUE(worker.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 42);
  auto scheduled = coordinator.Schedule({"echo"});
  ASSERT_TRUE(scheduled.ok()) << scheduled.status().ToString();
  ASSERT_EQ(scheduled->ids.size(), 1u);
  ASSERT_TRUE(worker.WaitForPushes(1));
  const Pushed pushed = worker.pushed().front();
  EXPECT_EQ(pushed.closure_id, scheduled->ids[0]);
  EXPECT_EQ(pushed.attempt, 1u);
  EXPECT_EQ(pushed.function, "echo");
  EXPECT_EQ(pushed.args, "a0");

  EXPECT_EQ(*worker.Report(pushed.closure_id, 2, "wrong attempt"), 1u);
  EXPECT_EQ(*worker.Report(pushed.closure_id, 1, "first"), 0u);
  EXPECT_EQ(*worker.Report(pushed.closure_id, 1, "second"), 1u);
  EXPECT_EQ(ReportsIgnored(admin, loop), 2u);

  auto outcomes = coordinator.Await();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  ASSERT_EQ(outcomes->size(), 1u);
  EXPECT_EQ((*outcomes)[0].state, rpc::ClosureState::FINISHED);
  EXPECT_EQ((*outcomes)[0].result, "first");
  auto done = coordinator.Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->first);
  // Releasing (with the next awaitResults) forgets it.
  ASSERT_TRUE(coordinator.Outcomes({pushed.closure_id}).ok());
  auto second = coordinator.Schedule({"noop"});
  ASSERT_TRUE(worker.WaitForPushes(2));
  EXPECT_EQ(*worker.Report(second->ids[0], 1, "2nd"), 0u);
  auto next = coordinator.Await({pushed.closure_id});
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->size(), 1u);
  EXPECT_EQ((*next)[0].result, "2nd");
  auto gone = coordinator.Outcomes({pushed.closure_id});
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
}

// One awaitResults may wait per session; a second one is FailedPrecondition,
// but only after it made its release (PROTOCOL.md says so: a client must not
// count on a refused call having released nothing).
TEST(ClosureProtocol, ASecondWaitingAwaitResultsIsRefusedAfterItsReleaseWasMade) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  ClosureWorker worker(loop, dispatcher.address(), "w1", 1);
  ASSERT_TRUE(worker.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 43);
  auto scheduled = coordinator.Schedule({"echo"});
  ASSERT_TRUE(scheduled.ok());
  ASSERT_TRUE(worker.WaitForPushes(1));
  EXPECT_EQ(*worker.Report(scheduled->ids[0], 1, "r"), 0u);
  ASSERT_EQ(coordinator.Await()->size(), 1u);
  auto waiting = coordinator.AwaitPending().eagerlyEvaluate(nullptr);
  // The waiting call reached the dispatcher before this one (same connection).
  auto second = coordinator.Await({scheduled->ids[0]});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << second.status().ToString();
  EXPECT_NE(second.status().message().find("already has an awaitResults waiting"),
            std::string::npos)
      << second.status().message();
  auto gone = coordinator.Outcomes({scheduled->ids[0]});
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << "the refused call released it";
}

TEST(ClosureProtocol, CancelOfARunningClosureTellsItsWorkerAndFencesItsLateReport) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient admin(loop, dispatcher.address());
  ClosureWorker worker(loop, dispatcher.address(), "w1", 1);
  ASSERT_TRUE(worker.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 42);
  auto scheduled = coordinator.Schedule({"sleep", "echo", "echo"});
  ASSERT_TRUE(scheduled.ok()) << scheduled.status().ToString();
  ASSERT_TRUE(worker.WaitForPushes(1));
  const uint64_t running = scheduled->ids[0], queued = scheduled->ids[1];
  EXPECT_EQ(worker.pushed().front().closure_id, running);

  auto states = coordinator.Cancel({running, queued, running});
  ASSERT_TRUE(states.ok()) << states.status().ToString();
  EXPECT_EQ(*states, (std::vector<rpc::ClosureState>(3, rpc::ClosureState::CANCELLED)));
  // The worker hears of its closure (not of the queued one) and gets the
  // next closure in the freed slot (in either order: the push of an
  // assignment may go before its commit, a cancel goes after its own).
  ASSERT_TRUE(worker.WaitForPushes(3));
  std::vector<std::pair<uint64_t, std::string>> after_first;
  for (size_t i = 1; i < worker.pushed().size(); ++i)
    after_first.emplace_back(worker.pushed()[i].closure_id, worker.pushed()[i].function);
  std::sort(after_first.begin(), after_first.end());
  EXPECT_EQ(after_first, (std::vector<std::pair<uint64_t, std::string>>{
                             {running, "<cancel>"}, {scheduled->ids[2], "echo"}}));
  EXPECT_EQ(*worker.Report(running, 1, "late"), 1u);  // ignored
  EXPECT_EQ(ReportsIgnored(admin, loop), 1u);
  auto late = Try(loop, admin.dispatcher().getClosureStatsRequest().send().then([](auto r) {
    return r.getStats().getLateReportsIgnored();
  }));
  EXPECT_EQ(*late, 1u);
  // Done ones are left as they are; no first error.
  EXPECT_EQ(*worker.Report(scheduled->ids[2], 1, "r"), 0u);
  ASSERT_TRUE(WaitUntil([&] { return coordinator.Done()->first; }, loop));
  auto after = coordinator.Cancel({scheduled->ids[2], running});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, (std::vector<rpc::ClosureState>{rpc::ClosureState::FINISHED,
                                                        rpc::ClosureState::CANCELLED}));
  auto outcomes = coordinator.Outcomes({running, scheduled->ids[2]});
  ASSERT_TRUE(outcomes.ok());
  EXPECT_EQ((*outcomes)[0].state, rpc::ClosureState::CANCELLED);
  EXPECT_EQ((*outcomes)[1].result, "r");
  // An unknown id: NotFound naming it, and nothing cancelled.
  auto unknown = coordinator.Cancel({scheduled->ids[2], 424242});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("closure 424242"), std::string::npos);
  // Over --max-closures-per-call: InvalidArgument naming the limit.
  DispatcherProcess small({.extra_flags = {"--max-closures-per-call=2"}});
  Coordinator other(loop, small.address(), 5);
  auto over = other.Cancel({1, 2, 3});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("limit of 2"), std::string::npos)
      << over.status().ToString();
}

// Dependencies on the wire: inputs by id or by index in the same call; the
// worker gets the inputs' result bytes with the assignment; an unknown or
// released input is NotFound naming it and schedules nothing of the call.
TEST(ClosureProtocol, InputsArePushedWithTheAssignmentAndUnknownOnesAreNotFound) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  ClosureWorker worker(loop, dispatcher.address(), "w1", 4);
  ASSERT_TRUE(worker.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 42);
  auto first = coordinator.ScheduleWithInputs({{}});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const uint64_t a = first->ids[0];
  ASSERT_TRUE(worker.WaitForPushes(1));
  EXPECT_TRUE(worker.pushed()[0].inputs.empty());
  auto chained = coordinator.ScheduleWithInputs({{a}, {kInputInCall + 0, a}});
  ASSERT_TRUE(chained.ok()) << chained.status().ToString();
  const uint64_t b = chained->ids[0], c = chained->ids[1];
  EXPECT_EQ(*worker.Report(a, 1, "x"), 0u);
  ASSERT_TRUE(worker.WaitForPushes(2));
  EXPECT_EQ(worker.pushed()[1].closure_id, b);
  EXPECT_EQ(worker.pushed()[1].inputs, (std::vector<std::string>{"x"}));
  EXPECT_EQ(*worker.Report(b, 1, "y"), 0u);
  ASSERT_TRUE(worker.WaitForPushes(3));
  EXPECT_EQ(worker.pushed()[2].closure_id, c);
  EXPECT_EQ(worker.pushed()[2].inputs, (std::vector<std::string>{"y", "x"}));

  auto unknown = coordinator.ScheduleWithInputs({{}, {999}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("input closure 999"), std::string::npos)
      << unknown.status().ToString();
  auto later = coordinator.ScheduleWithInputs({{kInputInCall + 1}, {}});
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.status().code(), StatusCode::kInvalidArgument);
  // Nothing of the refused calls was scheduled: the next id follows c.
  auto next = coordinator.ScheduleWithInputs({{}});
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->ids[0], c + 1);

  // Released: gone as an input, at once.
  EXPECT_EQ(*worker.Report(c, 1, "z"), 0u);
  ASSERT_TRUE(coordinator.Await({a}).ok());
  auto released = coordinator.ScheduleWithInputs({{a}});
  ASSERT_FALSE(released.ok());
  EXPECT_EQ(released.status().code(), StatusCode::kNotFound);
}

TEST(ClosureProtocol, LostWorkerPutsItsClosureBackAndItsLateReportIsFenced) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient admin(loop, dispatcher.address());
  ClosureWorker first(loop, dispatcher.address(), "first", 1);
  ASSERT_TRUE(first.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 7);
  auto scheduled = coordinator.Schedule({"sleep"});
  ASSERT_TRUE(scheduled.ok());
  ASSERT_TRUE(first.WaitForPushes(1));
  const uint64_t old_worker_id = first.worker_id();
  first.Disconnect();  // the dispatcher removes it and puts the closure back

  ClosureWorker second(loop, dispatcher.address(), "second", 1);
  ASSERT_TRUE(second.Heartbeat().ok());
  ASSERT_TRUE(second.WaitForPushes(1));
  EXPECT_EQ(second.pushed().front().closure_id, scheduled->ids[0]);
  EXPECT_EQ(second.pushed().front().attempt, 2u);
  // The first worker's late result (from its old registration) is ignored.
  EXPECT_EQ(*second.Report(scheduled->ids[0], 1, "late", nullptr, old_worker_id), 1u);
  EXPECT_EQ(*second.Report(scheduled->ids[0], 2, "on time"), 0u);
  auto outcomes = coordinator.Await();
  ASSERT_TRUE(outcomes.ok());
  ASSERT_EQ(outcomes->size(), 1u);
  EXPECT_EQ((*outcomes)[0].result, "on time");
}

TEST(ClosureProtocol, LostWorkersUseUpTheAttemptsAndFailTheClosureButNotTheCoordinator) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-closure-attempts=2"}});
  ClientLoop loop;
  Coordinator coordinator(loop, dispatcher.address(), 9);
  auto scheduled = coordinator.Schedule({"crash"});
  ASSERT_TRUE(scheduled.ok());
  for (int i = 0; i < 2; ++i) {
    ClosureWorker worker(loop, dispatcher.address(), "w" + std::to_string(i), 1);
    ASSERT_TRUE(worker.Heartbeat().ok());
    ASSERT_TRUE(worker.WaitForPushes(1));
    EXPECT_EQ(worker.pushed().front().attempt, static_cast<uint32_t>(i + 1));
  }  // each worker's connection drops here
  auto outcomes = coordinator.Await();
  ASSERT_TRUE(outcomes.ok());
  ASSERT_EQ(outcomes->size(), 1u);
  EXPECT_EQ((*outcomes)[0].state, rpc::ClosureState::FAILED);
  EXPECT_NE((*outcomes)[0].error.find("ran 2 times (max_closure_attempts 2)"), std::string::npos)
      << (*outcomes)[0].error;
  // Its workers failed, not the function: no first error for the coordinator.
  auto done = coordinator.Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->first);
  EXPECT_TRUE(done->second.empty()) << done->second;
}

// Closures travel only by runClosures: a worker that announces slots and
// functions but hands over no WorkerControl is given none (before, each push
// failed and burned one of the closure's attempts), and they wait, counted as
// queuedWithoutWorker, for a worker that can take them.
TEST(ClosureProtocol, AWorkerWithoutAWorkerControlIsGivenNoClosures) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-closure-attempts=2"}});
  ClientLoop loop;
  DsClient admin(loop, dispatcher.address());
  ClosureWorker mute(loop, dispatcher.address(), "mute", 4, /*send_control=*/false);
  ASSERT_TRUE(mute.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 13);
  auto scheduled = coordinator.Schedule({"echo"});
  ASSERT_TRUE(scheduled.ok());
  auto stats = [&]() {
    return *Try(loop, admin.dispatcher().getClosureStatsRequest().send().then([](auto r) {
      return std::make_tuple(r.getStats().getQueuedWithoutWorker(), r.getStats().getPushesFailed(),
                             r.getStats().getPutBack());
    }));
  };
  ASSERT_TRUE(WaitUntil([&]() { return std::get<0>(stats()) == 1; }, loop))
      << "the closure should wait for a worker that can take it";
  ASSERT_TRUE(mute.Heartbeat().ok());
  EXPECT_EQ(std::get<1>(stats()), 0u) << "no push to a worker without a WorkerControl";
  EXPECT_EQ(std::get<2>(stats()), 0u);

  ClosureWorker able(loop, dispatcher.address(), "able", 1);
  ASSERT_TRUE(able.Heartbeat().ok());
  ASSERT_TRUE(able.WaitForPushes(1));
  EXPECT_EQ(able.pushed().front().closure_id, scheduled->ids[0]);
  EXPECT_EQ(able.pushed().front().attempt, 1u) << "no attempt was used up before";
  EXPECT_EQ(*able.Report(scheduled->ids[0], 1, "ok"), 0u);
  auto outcomes = coordinator.Await();
  ASSERT_TRUE(outcomes.ok());
  ASSERT_EQ(outcomes->size(), 1u);
  EXPECT_EQ((*outcomes)[0].result, "ok");
}

TEST(ClosureProtocol, UserErrorCancelsQueuedClosuresAndIsRaisedOnceBySchedule) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  ClosureWorker worker(loop, dispatcher.address(), "w", 1);
  ASSERT_TRUE(worker.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 5);
  Coordinator bystander(loop, dispatcher.address(), 6);
  auto scheduled = coordinator.Schedule({"fail", "noop", "noop"});
  ASSERT_TRUE(scheduled.ok());
  ASSERT_TRUE(worker.WaitForPushes(1));  // one slot: the others stay queued
  EXPECT_EQ(*worker.Report(scheduled->ids[0], 1, "", "boom"), 0u);
  std::map<uint64_t, Outcome> seen;
  ASSERT_TRUE(WaitUntil(
      [&]() {
        auto outcomes = coordinator.Await();
        if (!outcomes.ok()) return false;
        for (const Outcome& o : *outcomes) seen[o.closure_id] = o;
        return seen.size() == 3;
      },
      loop));
  EXPECT_EQ(seen[scheduled->ids[0]].state, rpc::ClosureState::FAILED);
  EXPECT_EQ(seen[scheduled->ids[0]].error, "boom");
  EXPECT_EQ(seen[scheduled->ids[1]].state, rpc::ClosureState::CANCELLED);
  EXPECT_EQ(seen[scheduled->ids[2]].state, rpc::ClosureState::CANCELLED);

  auto raised = coordinator.Schedule({"noop"});
  ASSERT_TRUE(raised.ok());
  EXPECT_EQ(raised->error, "boom");
  EXPECT_TRUE(raised->ids.empty());  // nothing was scheduled with the error
  auto after = coordinator.Schedule({"noop"});
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->error.empty());
  EXPECT_EQ(after->ids.size(), 1u);
  // Another coordinator never sees it.
  EXPECT_TRUE(bystander.Done()->second.empty());
}

TEST(ClosureProtocol, ScheduleWaitsForQueueRoomInsteadOfFailing) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-queued-closures=4"}});
  ClientLoop loop;
  Coordinator coordinator(loop, dispatcher.address(), 3);
  ASSERT_EQ(coordinator.Schedule({"noop", "noop", "noop", "noop"})->ids.size(), 4u);
  bool admitted = false;
  auto waiting = coordinator.ScheduleAsync({"noop", "noop"})
                     .then([&](auto scheduled) {
                       admitted = true;
                       return scheduled;
                     })
                     .fork();
  auto probe = waiting.addBranch();
  // Nothing drains the queue yet: the call stays parked while other calls run.
  DsClient admin(loop, dispatcher.address());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(admin.ListJobs().ok());
  EXPECT_FALSE(admitted);
  // A worker takes two: room for the waiting batch.
  ClosureWorker worker(loop, dispatcher.address(), "w", 2);
  ASSERT_TRUE(worker.Heartbeat().ok());
  auto scheduled = Try(loop, kj::mv(probe));
  ASSERT_TRUE(scheduled.ok()) << scheduled.status().ToString();
  EXPECT_EQ(scheduled->ids.size(), 2u);
  EXPECT_TRUE(admitted);
}

TEST(ClosureProtocol, StaggeredStartKeepsTheSecondWorkerWaitingForItsDelay) {
  // Worker i gets closures only min(i * 1500, 3000) ms after it attached: the
  // first at once, the second later.
  DispatcherProcess dispatcher(
      {.extra_flags = {"--closure-start-delay-ms=1500", "--closure-start-delay-max-ms=3000"}});
  ClientLoop loop;
  DsClient admin(loop, dispatcher.address());
  ClosureWorker first(loop, dispatcher.address(), "first", 1);
  ClosureWorker second(loop, dispatcher.address(), "second", 1);
  ASSERT_TRUE(first.Heartbeat().ok());
  ASSERT_TRUE(second.Heartbeat().ok());
  Coordinator coordinator(loop, dispatcher.address(), 13);
  auto scheduled = coordinator.Schedule({"noop", "noop"});
  ASSERT_TRUE(scheduled.ok());
  ASSERT_TRUE(first.WaitForPushes(1));
  // Without the stagger both closures would go out in the same pass, one per
  // worker; a later call on the same dispatcher orders after that pass.
  ASSERT_TRUE(admin.ListJobs().ok());
  EXPECT_TRUE(second.pushed().empty()) << "the second worker got closures before its delay";
  EXPECT_EQ(first.pushed().size(), 1u);  // one slot: the other closure waits
  // Once its delay is over, the second worker takes the other closure.
  ASSERT_TRUE(second.WaitForPushes(1));
  EXPECT_EQ(second.pushed().front().closure_id, scheduled->ids[1]);
}

// Found by the simulation (tests/sim, pinned seeds 29, 152, 193, 294): the
// reply of a schedule was lost, and by its retry the coordinator had a
// pending first error. The retry used to get the error, so the coordinator
// believed its closures unscheduled although they ran, and never released them.
// Found by the simulation (tests/sim, pinned seeds 9557, 9623): a copy of a
// schedule call that reached the dispatcher after the call was refused with
// the first error (a late copy from a connection the client gave up on) used
// to queue the closures the client was told were not queued.
// Found by the simulation (tests/sim, pinned seeds 27, 216, 226, 255): a
// worker process that reconnects before the dispatcher sees its old
// connection end drops the outcomes of closures pushed on the old one
// (ClosureRunner); those closures used to stay assigned to it forever.
TEST(ClosureProtocol, ScheduledClosuresAndUnfetchedResultsSurviveKillNine) {
  TempDir dir;
  std::vector<uint64_t> ids;
  {
    DispatcherProcess dispatcher({.work_dir = dir.path()});
    ClientLoop loop;
    ClosureWorker worker(loop, dispatcher.address(), "w", 1);
    ASSERT_TRUE(worker.Heartbeat().ok());
    Coordinator coordinator(loop, dispatcher.address(), 21);
    ids = coordinator.Schedule({"echo", "echo", "echo"})->ids;
    ASSERT_TRUE(worker.WaitForPushes(1));
    ASSERT_EQ(*worker.Report(ids[0], 1, "kept"), 0u);
    dispatcher.process().Signal(SIGKILL);
    dispatcher.process().Wait(std::chrono::seconds(10));
  }
  DispatcherProcess restarted({.work_dir = dir.path()});
  ClientLoop loop;
  Coordinator coordinator(loop, restarted.address(), 21);
  auto outcomes = coordinator.Outcomes(ids);
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  ASSERT_EQ(outcomes->size(), 3u);
  EXPECT_EQ((*outcomes)[0].state, rpc::ClosureState::FINISHED);
  EXPECT_EQ((*outcomes)[0].result, "kept");
  EXPECT_EQ((*outcomes)[1].state, rpc::ClosureState::QUEUED);
  // A new session reports the unreleased outcome again; the rest still run.
  auto again = coordinator.Await();
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].result, "kept");
  ClosureWorker worker(loop, restarted.address(), "w2", 2);
  ASSERT_TRUE(worker.Heartbeat().ok());
  ASSERT_TRUE(worker.WaitForPushes(2));
  for (const Pushed& p : worker.pushed()) ASSERT_EQ(*worker.Report(p.closure_id, p.attempt, "r"), 0u);
  std::set<uint64_t> done;
  ASSERT_TRUE(WaitUntil(
      [&]() {
        auto outcomes = coordinator.Await({(*again)[0].closure_id});
        if (!outcomes.ok()) return false;
        for (const Outcome& o : *outcomes) done.insert(o.closure_id);
        return done.size() == 2;
      },
      loop));
  EXPECT_FALSE(coordinator.Outcomes({ids[0]}).ok());  // released
}

}  // namespace
}  // namespace dispatch::testing
