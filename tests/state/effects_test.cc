// Effects (state/effects.h): what Apply says an update did must be what the
// state shows it did. The randomized test works the effects out again from a
// diff of the state before and after each generated update (closures whose
// state changed, the queue, first errors, tasks), so a recording point that
// is missing or wrong fails it; the others pin dependants moving on and show
// that asking for effects changes nothing in the state.

#include "state/effects.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "state/codec.h"
#include "state/dispatcher_state.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"
#include "tests/state/update_generator.h"
#include "tests/support/test_seed.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

std::string Describe(const ClosureEnded& e) {
  return "ended{" + std::to_string(e.closure_id) + " of " + std::to_string(e.coordinator_id) + " " +
         ClosureStateName(e.outcome) + (e.infrastructure ? " infrastructure" : "") +
         (e.deadline_exceeded ? " deadline" : "") + "}";
}
std::string Describe(const RunStarted& r) {
  return "started{" + std::to_string(r.closure_id) + " on " + std::to_string(r.worker_id) + " #" +
         std::to_string(r.attempt) + "}";
}
std::string Describe(const RunEnded& r) {
  return "run ended{" + std::to_string(r.closure_id) + " on " + std::to_string(r.worker_id) + " #" +
         std::to_string(r.attempt) + " " + ClosureStateName(r.outcome) +
         (r.reported ? " reported" : "") + "}";
}
std::string Describe(const PutBack& p) {
  return "put back{" + std::to_string(p.closure_id) + " from " + std::to_string(p.worker_id) +
         (p.transient ? " transient" : "") + "}";
}
std::string Describe(const FirstError& f) {
  return "first error{" + std::to_string(f.coordinator_id) + ": " + std::to_string(f.closure_id) +
         "}";
}
std::string Describe(uint64_t id) { return std::to_string(id); }

// The items as a sorted list of descriptions: the effects' order is the
// state's order of changes, which a diff cannot see.
template <typename T>
std::vector<std::string> Sorted(const std::vector<T>& items) {
  std::vector<std::string> out;
  for (const T& item : items) out.push_back(Describe(item));
  std::sort(out.begin(), out.end());
  return out;
}

bool InQueue(ClosureState s) { return s == ClosureState::QUEUED || s == ClosureState::WAITING; }

// The closures and tasks of a state, copied (the state changes after).
struct Picture {
  std::map<uint64_t, Closure> closures;
  std::map<uint64_t, Task> tasks;
  std::map<uint64_t, uint64_t> errors;  // coordinator -> closure of its first error
};

Picture Take(const DispatcherState& state, std::set<uint64_t>& coordinators) {
  Picture p;
  for (uint64_t id = 1; id < state.NextClosureId(); ++id) {
    if (const Closure* c = state.FindClosure(id)) {
      p.closures.emplace(id, *c);
      coordinators.insert(c->coordinator_id);
    }
  }
  for (uint64_t id = 1; id < state.NextTaskId(); ++id) {
    if (const Task* t = state.FindTask(id)) p.tasks.emplace(id, *t);
  }
  for (uint64_t coordinator : coordinators) {
    if (const CoordinatorError* e = state.FindCoordinatorError(coordinator))
      p.errors.emplace(coordinator, e->closure_id);
  }
  return p;
}

// What the update did, from the two pictures (and, for what a closure record
// does not keep, the update itself: whether a failure names its run's worker
// and is an infrastructure failure).
Effects Diff(const Picture& before, const Picture& after, journal::Update::Reader update) {
  Effects e;
  e.time_micros = update.getTimeMicros();
  const bool failed = update.isClosureFailed();
  const uint64_t failed_id = failed ? update.getClosureFailed().getClosureId() : 0;
  for (const auto& [id, was] : before.closures) {
    if (!after.closures.contains(id)) e.released.push_back(id);
  }
  for (const auto& [id, now] : after.closures) {
    auto it = before.closures.find(id);
    const Closure* was = it == before.closures.end() ? nullptr : &it->second;
    if (was == nullptr) e.scheduled.push_back(id);
    const bool moved = was == nullptr || was->state != now.state;
    if (!moved) continue;
    if (now.state == ClosureState::QUEUED) e.queued.push_back(id);
    if (was != nullptr && was->state == ClosureState::ASSIGNED) {
      const bool reported =
          now.state == ClosureState::FINISHED ||
          (failed && failed_id == id && update.getClosureFailed().getWorkerId() != 0);
      e.runs_ended.push_back({id, was->worker_id, was->attempts, now.state, reported});
      if (now.state == ClosureState::QUEUED) {
        e.put_back.push_back(
            {id, was->worker_id, now.transient_failures > was->transient_failures});
      }
    }
    if (now.state == ClosureState::ASSIGNED)
      e.runs_started.push_back({id, now.worker_id, now.attempts});
    if (IsClosureDone(now.state)) {
      // A failure by deadline keeps the deadline (every other end of a
      // running closure clears it); the update says whether it was that.
      const bool own_failure = failed && failed_id == id;
      const bool deadline = own_failure && update.getClosureFailed().getDeadlineExceeded();
      EXPECT_EQ(deadline,
                was != nullptr && now.state == ClosureState::FAILED && now.deadline_micros != 0)
          << "closure " << id;
      const bool infrastructure = own_failure && update.getClosureFailed().getInfrastructure();
      e.ended.push_back({id, now.coordinator_id, now.state, infrastructure, deadline});
    }
    if (was != nullptr && InQueue(was->state) && !InQueue(now.state)) e.queue_shrank = true;
  }
  for (const auto& [coordinator, closure] : after.errors) {
    auto it = before.errors.find(coordinator);
    if (it == before.errors.end() || it->second != closure)
      e.first_errors.push_back({coordinator, closure});
  }
  for (const auto& [coordinator, closure] : before.errors) {
    if (!after.errors.contains(coordinator)) e.errors_cleared.push_back(coordinator);
  }
  for (const auto& [id, was] : before.tasks) {
    auto it = after.tasks.find(id);
    if (it == after.tasks.end()) {
      e.tasks_removed.push_back(id);
      continue;
    }
    if (!was.finished && it->second.finished) e.tasks_finished.push_back(id);
    if (was.pending && !it->second.pending) e.tasks_activated.push_back(id);
  }
  for (const auto& [id, now] : after.tasks) {
    if (!before.tasks.contains(id)) e.tasks_created.push_back(id);
  }
  return e;
}

void ExpectSame(const Effects& expected, const Effects& got, int step) {
  SCOPED_TRACE("update " + std::to_string(step));
  EXPECT_EQ(got.time_micros, expected.time_micros);
  EXPECT_EQ(Sorted(got.scheduled), Sorted(expected.scheduled)) << "scheduled";
  EXPECT_EQ(Sorted(got.queued), Sorted(expected.queued)) << "queued";
  EXPECT_EQ(Sorted(got.put_back), Sorted(expected.put_back)) << "put back";
  EXPECT_EQ(Sorted(got.runs_started), Sorted(expected.runs_started)) << "runs started";
  EXPECT_EQ(Sorted(got.runs_ended), Sorted(expected.runs_ended)) << "runs ended";
  EXPECT_EQ(Sorted(got.ended), Sorted(expected.ended)) << "ended";
  EXPECT_EQ(Sorted(got.released), Sorted(expected.released)) << "released";
  EXPECT_EQ(Sorted(got.first_errors), Sorted(expected.first_errors)) << "first errors";
  EXPECT_EQ(Sorted(got.errors_cleared), Sorted(expected.errors_cleared)) << "errors cleared";
  EXPECT_EQ(got.queue_shrank, expected.queue_shrank) << "queue shrank";
  EXPECT_EQ(Sorted(got.tasks_created), Sorted(expected.tasks_created)) << "tasks created";
  EXPECT_EQ(Sorted(got.tasks_activated), Sorted(expected.tasks_activated)) << "tasks activated";
  EXPECT_EQ(Sorted(got.tasks_finished), Sorted(expected.tasks_finished)) << "tasks finished";
  EXPECT_EQ(Sorted(got.tasks_removed), Sorted(expected.tasks_removed)) << "tasks removed";
}

TEST(Effects, EveryAppliedUpdateSaysWhatTheStateShowsItDid) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState state;
  std::set<uint64_t> coordinators;
  Effects effects;
  // Each kind of effect must show up, or the comparison proved nothing.
  std::map<std::string, int> seen;
  for (int i = 0; i < 4000; ++i) {
    OwnedUpdate update = generator.Next(state);
    const Picture before = Take(state, coordinators);
    ASSERT_TRUE(state.Apply(update.reader(), &effects).ok()) << "update " << i;
    const Picture after = Take(state, coordinators);
    const Effects expected = Diff(before, after, update.reader());
    ExpectSame(expected, effects, i);
    if (::testing::Test::HasFailure()) return;
    seen["scheduled"] += !effects.scheduled.empty();
    seen["queued"] += !effects.queued.empty();
    seen["put_back"] += !effects.put_back.empty();
    seen["runs_started"] += !effects.runs_started.empty();
    seen["runs_ended"] += !effects.runs_ended.empty();
    seen["ended"] += !effects.ended.empty();
    seen["released"] += !effects.released.empty();
    seen["first_errors"] += !effects.first_errors.empty();
    seen["errors_cleared"] += !effects.errors_cleared.empty();
    seen["queue_shrank"] += effects.queue_shrank;
    seen["tasks_created"] += !effects.tasks_created.empty();
    seen["tasks_activated"] += !effects.tasks_activated.empty();
    seen["tasks_finished"] += !effects.tasks_finished.empty();
    seen["tasks_removed"] += !effects.tasks_removed.empty();
  }
  for (const auto& [what, n] : seen) EXPECT_GT(n, 0) << what << " never happened";
  EXPECT_EQ(seen.size(), 14u);
}

// DependencyChain() with closure 1 running on worker 1.
DispatcherState Chain() {
  DispatcherState state = DependencyChain();
  EXPECT_TRUE(Applies(state, AssignClosure(1, 1, 1)));
  return state;
}

TEST(Effects, AFinishedInputQueuesItsDependantAndNoFurther) {
  DispatcherState state = Chain();
  Effects effects;
  ASSERT_TRUE(state.Apply(FinishClosure(1, 1, 1, "r").At(5).reader(), &effects).ok());
  EXPECT_EQ(effects.time_micros, 5);
  EXPECT_EQ(effects.runs_ended,
            (std::vector<RunEnded>{{1, 1, 1, ClosureState::FINISHED, /*reported=*/true}}));
  EXPECT_EQ(effects.ended, (std::vector<ClosureEnded>{{1, 7, ClosureState::FINISHED}}));
  EXPECT_EQ(effects.queued, (std::vector<uint64_t>{2}));  // 3 still waits for 2
  EXPECT_FALSE(effects.queue_shrank);                     // waiting -> queued is no room
  EXPECT_TRUE(effects.first_errors.empty());
}

TEST(Effects, AFailedInputEndsEveryDependantTransitivelyAndSetsTheFirstError) {
  DispatcherState state = Chain();
  Effects effects;
  ASSERT_TRUE(state.Apply(FailClosure(1, 1, 1, "boom").reader(), &effects).ok());
  EXPECT_EQ(effects.runs_ended,
            (std::vector<RunEnded>{{1, 1, 1, ClosureState::FAILED, /*reported=*/true}}));
  EXPECT_EQ(effects.ended, (std::vector<ClosureEnded>{{1, 7, ClosureState::FAILED},
                                                      {2, 7, ClosureState::FAILED},
                                                      {3, 7, ClosureState::FAILED}}));
  EXPECT_EQ(effects.first_errors, (std::vector<FirstError>{{7, 1}}));
  EXPECT_TRUE(effects.queue_shrank);  // 2 and 3 waited
  EXPECT_TRUE(effects.queued.empty());
}

TEST(Effects, ACancelledRunningInputEndsItsRunUnreportedAndCancelsNothingElse) {
  DispatcherState state = Chain();
  Effects effects;
  ASSERT_TRUE(state.Apply(CancelClosures({1, 2}).reader(), &effects).ok());
  EXPECT_EQ(effects.runs_ended,
            (std::vector<RunEnded>{{1, 1, 1, ClosureState::CANCELLED, /*reported=*/false}}));
  // 2 is cancelled as asked, not failed by its input; 3 fails with 2.
  EXPECT_EQ(effects.ended, (std::vector<ClosureEnded>{{1, 7, ClosureState::CANCELLED},
                                                      {2, 7, ClosureState::CANCELLED},
                                                      {3, 7, ClosureState::FAILED}}));
  EXPECT_TRUE(effects.first_errors.empty());
}

TEST(Effects, ADispatcherFailureIsNotReportedAndSaysWhy) {
  DispatcherState state = Chain();
  Effects effects;
  ASSERT_TRUE(
      state.Apply(FailClosure(1, 0, 0, "lost", false, /*infrastructure=*/true).reader(), &effects)
          .ok());
  ASSERT_EQ(effects.runs_ended.size(), 1u);
  EXPECT_FALSE(effects.runs_ended[0].reported);
  ASSERT_EQ(effects.ended.size(), 3u);
  EXPECT_EQ(effects.ended[0], (ClosureEnded{1, 7, ClosureState::FAILED, true, false}));
  // Its dependants fail because of it, not as infrastructure failures of theirs.
  EXPECT_FALSE(effects.ended[1].infrastructure);
  EXPECT_TRUE(effects.first_errors.empty());  // never a first error
}

TEST(Effects, ARefusedUpdateLeavesNoEffects) {
  DispatcherState state = Chain();
  Effects effects;
  ASSERT_TRUE(state.Apply(FinishClosure(1, 1, 1, "r").reader(), &effects).ok());
  ASSERT_FALSE(effects.empty());
  EXPECT_FALSE(state.Apply(FinishClosure(1, 1, 1, "r").reader(), &effects).ok());
  EXPECT_TRUE(effects.empty());
  ASSERT_TRUE(state.Apply(CancelClosure(2).reader(), &effects).ok());
  EXPECT_FALSE(state.Apply(ReleaseClosure(99).reader(), &effects).ok());  // unknown
  EXPECT_TRUE(effects.empty());
}

TEST(Effects, ReplayWithAndWithoutEffectsGivesTheSameDigest) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState live;
  std::vector<std::string> journal;
  for (int i = 0; i < 3000; ++i) {
    OwnedUpdate update = generator.Next(live);
    ASSERT_TRUE(live.Apply(update.reader()).ok());
    journal.push_back(update.ToBytes());
  }
  DispatcherState without;
  DispatcherState with;
  Effects effects;
  size_t effects_seen = 0;
  for (size_t i = 0; i < journal.size(); ++i) {
    ASSERT_TRUE(ApplyEncodedUpdate(without, journal[i]).ok()) << "record " << i;
    ASSERT_TRUE(ApplyEncodedUpdate(with, journal[i], &effects).ok()) << "record " << i;
    effects_seen += effects.empty() ? 0 : 1;
    ASSERT_EQ(with.Digest(), without.Digest()) << "record " << i;
  }
  EXPECT_EQ(with.Digest(), live.Digest());
  EXPECT_GT(effects_seen, journal.size() / 4);  // the effects path did run
  // A state copied after an Apply with effects holds no trace of them.
  DispatcherState copy = with;
  EXPECT_EQ(copy.Digest(), with.Digest());
  EXPECT_TRUE(copy.CheckIndexes().ok());
}

TEST(Effects, DamagedBytesLeaveNoEffects) {
  DispatcherState state = Chain();
  Effects effects;
  ASSERT_TRUE(state.Apply(FinishClosure(1, 1, 1, "r").reader(), &effects).ok());
  std::string bytes = ReleaseClosure(1).ToBytes();
  bytes.resize(bytes.size() / 2);
  EXPECT_FALSE(ApplyEncodedUpdate(state, bytes, &effects).ok());
  EXPECT_TRUE(effects.empty());
}

}  // namespace
}  // namespace dispatch::state
