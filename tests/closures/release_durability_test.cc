// Outcome delivery across dispatcher restarts (issue 16).
// The wire: a release the dispatcher acknowledged (the awaitResults reply
// that carried it) is journaled before that reply leaves, so after kill -9
// and a restart on the same work dir the coordinator's new session never
// reports it again (a peer built from the schema alone, RawPeer, checks).
// The client: a Coordinator hands each outcome to its user once, even when a
// restarted dispatcher reports an outcome again (a release held back for a
// dependant is not journaled before the dependant is done, by design): the
// repeat is dropped, counted, and released again.
#include <capnp/message.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "tests/closures/closure_test_support.h"
#include "tests/support/raw_peer.h"

namespace dispatch::testing {
namespace {

using clients::RemoteValue;
using clients::ScheduleOptions;

constexpr uint64_t kCoordinatorId = 1616;

rpc::Coordinator::Client OpenCoordinator(RawPeer& peer, rpc::Dispatcher::Client& dispatcher) {
  auto open = dispatcher.openCoordinatorRequest();
  open.setCoordinatorId(kCoordinatorId);
  return peer.Wait(open.send()).getCoordinator();
}

uint64_t FinishedHeld(RawPeer& peer, rpc::Dispatcher::Client& dispatcher) {
  return peer.Wait(dispatcher.getClosureStatsRequest().send()).getStats().getFinished();
}

// Outcome ids from awaitResults calls that release nothing, until `n` came.
std::vector<uint64_t> AwaitOutcomes(RawPeer& peer, rpc::Coordinator::Client& coordinator,
                                    size_t n) {
  std::vector<uint64_t> ids;
  while (ids.size() < n) {
    auto request = coordinator.awaitResultsRequest();
    request.setMaxResults(static_cast<uint32_t>(n - ids.size()));
    auto reply = peer.Wait(request.send());
    for (auto outcome : reply.getResults()) ids.push_back(outcome.getClosureId());
  }
  return ids;
}

TEST(ReleaseDurability, AnAcknowledgedReleaseIsNeverReportedAgainAfterKill9) {
  constexpr unsigned kHalf = 50;
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 8);
  std::vector<uint64_t> released;
  {
    RawPeer peer(dispatcher.address());
    rpc::Dispatcher::Client d = peer.Authenticate();
    rpc::Coordinator::Client coordinator = OpenCoordinator(peer, d);
    auto schedule = coordinator.scheduleRequest();
    auto specs = schedule.initClosures(2 * kHalf);
    for (unsigned i = 0; i < 2 * kHalf; ++i) {
      specs[i].setFunction("noop");
      specs[i].setRequestId(i + 1);
    }
    ASSERT_EQ(peer.Wait(schedule.send()).getClosureIds().size(), 2 * kHalf);
    // Every closure done first, so the releasing call below returns at once
    // with one more outcome: that reply is the acknowledgement.
    ASSERT_TRUE(WaitUntil([&] { return FinishedHeld(peer, d) == 2 * kHalf; }));
    released = AwaitOutcomes(peer, coordinator, kHalf);
    auto release = coordinator.awaitResultsRequest();
    auto list = release.initRelease(kHalf);
    for (unsigned i = 0; i < kHalf; ++i) list.set(i, released[i]);
    release.setMaxResults(1);
    ASSERT_EQ(peer.Wait(release.send()).getResults().size(), 1u);
    // At once: nothing else the dispatcher does could journal the release.
    dispatcher.Kill9();
  }
  dispatcher.Start();
  RawPeer peer(dispatcher.address());
  rpc::Dispatcher::Client d = peer.Authenticate();
  EXPECT_EQ(FinishedHeld(peer, d), kHalf) << "the restarted dispatcher holds released outcomes";
  rpc::Coordinator::Client coordinator = OpenCoordinator(peer, d);
  // A new session reports every unreleased outcome, lowest id first: a lost
  // release would show here first.
  std::vector<uint64_t> reported = AwaitOutcomes(peer, coordinator, kHalf);
  const std::set<uint64_t> gone(released.begin(), released.end());
  for (uint64_t id : reported) {
    EXPECT_EQ(gone.count(id), 0u) << "closure " << id << " was released and acknowledged, "
                                  << "yet reported again after the restart";
  }
  for (uint64_t id : released) {
    auto outcomes = coordinator.getOutcomesRequest();
    outcomes.initClosureIds(1).set(0, id);
    auto failure = peer.Failure(outcomes.send());
    ASSERT_TRUE(failure.has_value()) << "released closure " << id << " is still known";
    EXPECT_EQ(std::string(failure->getDescription().cStr()).rfind("remote exception: NotFound: ", 0),
              0u)
        << failure->getDescription().cStr();
  }
}

TEST(ReleaseDurability, ACoordinatorHandsEachResultOutOnceAcrossKill9) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 2);
  auto coordinator = MakeCoordinator(dispatcher.address());
  // `held`'s dependant runs only on a worker that registers "late", which
  // comes after the restart: until then the release of `held` is held back
  // (not journaled), and the restarted dispatcher reports it again.
  auto held = coordinator->Schedule("echo", "held");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ScheduleOptions after_held;
  after_held.inputs = {*held};
  auto dependant = coordinator->Schedule("late", "", after_held);
  ASSERT_TRUE(dependant.ok()) << dependant.status().ToString();
  EXPECT_EQ(FetchOrDie(*held), "held");
  std::vector<RemoteValue> fetched;
  // The release of `held` goes with the awaitResults call after the one
  // that brings the next outcome; the reply to it (with the outcome after
  // that) is its acknowledgement. Two more round trips make sure of it.
  for (const char* args : {"one", "two", "three"}) {
    auto value = coordinator->Schedule("echo", args);
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    EXPECT_EQ(FetchOrDie(*value), args);
    fetched.push_back(*value);
  }
  const uint64_t held_id = held->closure_id();
  ASSERT_TRUE(WaitUntil([&] { return coordinator->status().releases_remembered >= 2; }));

  dispatcher.Kill9();
  dispatcher.Start();
  // The new session reports `held` again: dropped, not handed out.
  EXPECT_TRUE(WaitUntil([&] { return coordinator->status().duplicate_outcomes_dropped >= 1; }))
      << "the restarted dispatcher never reported the held release's outcome again";
  Result<std::string> again = coordinator->Attach(held_id).FetchFor(kFetchDeadline);
  EXPECT_FALSE(again.ok()) << "closure " << held_id << " was handed out twice: " << *again;
  if (!again.ok()) {
    EXPECT_EQ(again.status().code(), StatusCode::kNotFound) << again.status().ToString();
  }

  // Once the dependant ran, the dispatcher forgets everything: the repeat
  // was released again, not kept as an orphan nobody releases.
  auto late = MakeAgent(dispatcher.address(), "late-worker", 1);
  ASSERT_TRUE(late->RegisterFunction("late", [](const clients::ClosureCall&) {
                    return clients::ClosureOutput::Result("late");
                  }).ok());
  ASSERT_TRUE(late->Start().ok());
  EXPECT_EQ(FetchOrDie(*dependant), "late");
  coordinator->Close();  // sends the releases still pending
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.finished == 0 && c.queued == 0 && c.waiting == 0;
  })) << "the dispatcher still holds outcomes the coordinator was handed";
  late->Stop();
}

TEST(ReleaseDurability, TheBookRemembersTheLatestReleasesAndCountsTheForgotten) {
  auto book = std::make_shared<clients::ClosureBook>(10, 100, /*max_remembered_releases=*/2);
  std::vector<RemoteValue> values;
  for (int i = 0; i < 3; ++i) {
    auto cell = book->Add("echo", "x", {});
    ASSERT_TRUE(cell.ok());
    values.emplace_back(book, *cell);
  }
  capnp::MallocMessageBuilder ack_message;
  auto ack = ack_message.initRoot<rpc::Coordinator::ScheduleResults>();
  auto ids = ack.initClosureIds(3);
  std::vector<uint64_t> sequences;
  for (auto& c : book->TakeUnsent(10)) sequences.push_back(c.sequence);
  for (unsigned i = 0; i < 3; ++i) ids.set(i, 41 + i);
  book->OnAcknowledged(sequences, ack.asReader().getClosureIds());
  auto report = [&](uint64_t id) {
    capnp::MallocMessageBuilder message;
    auto results = message.initRoot<rpc::Coordinator::AwaitResultsResults>();
    auto outcome = results.initResults(1)[0];
    outcome.setClosureId(id);
    outcome.setState(rpc::ClosureState::FINISHED);
    outcome.setResult(kj::heapArray<kj::byte>(1).asPtr());
    book->OnOutcomes(results.asReader().getResults());
  };
  for (uint64_t id : {41, 42, 43}) report(id);
  for (auto& value : values) ASSERT_TRUE(value.Fetch().ok());
  book->OnReleased(book->TakeReleases());
  clients::ClosureBook::Counters counters = book->counters();
  EXPECT_EQ(counters.releases_remembered, 2u);
  EXPECT_EQ(counters.releases_forgotten, 1u);
  // A remembered one reported again: dropped and released again.
  report(43);
  EXPECT_EQ(book->counters().duplicate_outcomes_dropped, 1u);
  EXPECT_EQ(book->TakeReleases(), std::vector<uint64_t>{43});
  bool lookup = true;
  auto cell = book->Attach(43, &lookup);
  EXPECT_FALSE(lookup);
  EXPECT_EQ(cell->error.code(), StatusCode::kNotFound) << cell->error.ToString();
  // The forgotten one is kept like an outcome of an earlier process.
  report(41);
  EXPECT_EQ(book->counters().duplicate_outcomes_dropped, 1u);
  auto orphan = book->Attach(41, &lookup);
  EXPECT_FALSE(lookup);
  EXPECT_EQ(orphan->status, clients::RemoteValueStatus::kReady);
}

}  // namespace
}  // namespace dispatch::testing
