// Randomised properties over long valid sequences from UpdateGenerator:
// validity and coverage, index consistency, determinism of the digest, replay
// from bytes, and that rejected updates change nothing. Each test prints its
// seed; DISPATCH_TEST_SEED replays it.

#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <gtest/gtest.h>

#include "state/codec.h"
#include "state/dispatcher_state.h"
#include "tests/state/schema_coverage.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"
#include "tests/state/update_generator.h"
#include "tests/support/test_seed.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT

constexpr int kLongRun = 10000;

TEST(DispatcherStateRandom, GeneratedUpdatesAreValidKeepIndexesAndCoverEveryVariant) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState state;
  SchemaCoverage fields(capnp::Schema::from<journal::Update>());
  for (int i = 0; i < kLongRun; ++i) {
    OwnedUpdate update = generator.Next(state);
    fields.Add(capnp::toDynamic(update.reader()));
    ASSERT_TRUE(state.Check(update.reader()).ok()) << "update " << i;
    ASSERT_TRUE(state.Apply(update.reader()).ok()) << "update " << i;
    ASSERT_EQ(state.LastTimeMicros(), update.reader().getTimeMicros());
    if (i < 2000 || i % 50 == 0) {
      ASSERT_TRUE(state.CheckIndexes().ok()) << state.CheckIndexes().ToString();
    }
  }
  EXPECT_EQ(state.NumApplied(), static_cast<uint64_t>(kLongRun));
  for (journal::Update::Which which : AllTransitionVariants()) {
    auto it = generator.counts().find(which);
    EXPECT_TRUE(it != generator.counts().end() && it->second > 0)
        << VariantName(which) << " never generated";
  }
  // Finer: every field of every variant, and every member of a nested union
  // (batch kinds, heartbeat outcomes, named or anonymous jobs), is filled.
  EXPECT_EQ(JoinNames(fields.Missing(NoTransitionMembers())), "")
      << "the generator never gives these a non-default value (update_generator.cc)";
}

TEST(DispatcherStateRandom, ReplayingTheSameBytesGivesTheSameDigestAtEveryStep) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState live;
  DispatcherState replayed;
  for (int i = 0; i < 3000; ++i) {
    OwnedUpdate update = generator.Next(live);
    ASSERT_TRUE(live.Apply(update.reader()).ok());
    OwnedUpdate copy = OwnedUpdate::FromBytes(update.ToBytes());
    ASSERT_TRUE(replayed.Apply(copy.reader()).ok()) << "update " << i;
    ASSERT_EQ(live.Digest(), replayed.Digest()) << "update " << i;
  }
}

TEST(DispatcherStateRandom, TheSameSeedGivesTheSameSequence) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator a(seed), b(seed);
  DispatcherState state_a, state_b;
  for (int i = 0; i < 1000; ++i) {
    OwnedUpdate ua = a.Next(state_a), ub = b.Next(state_b);
    ASSERT_EQ(ua.ToBytes(), ub.ToBytes()) << "update " << i;
    ASSERT_TRUE(state_a.Apply(ua.reader()).ok());
    ASSERT_TRUE(state_b.Apply(ub.reader()).ok());
  }
  EXPECT_EQ(state_a.Digest(), state_b.Digest());
}

TEST(DispatcherStateRandom, DifferentSequencesGiveDifferentDigests) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator a(seed), b(seed + 1);
  DispatcherState state_a, state_b;
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(state_a.Apply(a.Next(state_a).reader()).ok());
    ASSERT_TRUE(state_b.Apply(b.Next(state_b).reader()).ok());
  }
  EXPECT_NE(state_a.Digest(), state_b.Digest());
}

// Variants whose time lands in a record that is never erased or overwritten.
bool RecordsTimeForever(journal::Update::Which which) {
  return which == journal::Update::REGISTER_DATASET || which == journal::Update::CREATE_JOB;
}

TEST(DispatcherStateRandom, ChangingTheTimeOfOneUpdateChangesTheDigest) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState state;
  std::vector<std::string> updates;
  for (int i = 0; i < 300; ++i) {
    OwnedUpdate update = generator.Next(state);
    ASSERT_TRUE(state.Apply(update.reader()).ok());
    updates.push_back(update.ToBytes());
  }
  // Shift, by one microsecond, the time of an early update that lands in a
  // record (not the last one: the state also keeps the latest time).
  size_t target = 10;
  while (target + 1 < updates.size() &&
         !RecordsTimeForever(OwnedUpdate::FromBytes(updates[target]).reader().which())) {
    ++target;
  }
  ASSERT_LT(target + 1, updates.size());
  DispatcherState shifted;
  for (size_t i = 0; i < updates.size(); ++i) {
    OwnedUpdate update = OwnedUpdate::FromBytes(updates[i]);
    if (i == target) update.builder().setTimeMicros(update.reader().getTimeMicros() + 1);
    ASSERT_TRUE(shifted.Apply(update.reader()).ok());
  }
  EXPECT_NE(shifted.Digest(), state.Digest())
      << VariantName(OwnedUpdate::FromBytes(updates[target]).reader().which()) << " at " << target;
}

// Each update's effect, seen through the snapshot and through the digest:
// the state before it, with the two counters every update moves (numApplied,
// lastTimeMicros) advanced, against the state after it. The two views must
// agree on whether anything changed (a part of the state that only one of
// WriteSnapshot and Digest covers makes them disagree), and every variant,
// batch kind and heartbeat outcome must change something in some update (one
// whose effect neither covers changes nothing).
TEST(DispatcherStateRandom, EveryVariantChangesTheSnapshotAndTheDigestAlike) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState state;
  SchemaCoverage changed(capnp::Schema::from<journal::Update>());
  for (int i = 0; i < 3000; ++i) {
    OwnedUpdate update = generator.Next(state);
    capnp::MallocMessageBuilder before;
    state.WriteSnapshot(before.initRoot<journal::StateSnapshot>());
    ASSERT_TRUE(state.Apply(update.reader()).ok());
    auto counters_moved = before.getRoot<journal::StateSnapshot>();
    counters_moved.setNumApplied(state.NumApplied());
    counters_moved.setLastTimeMicros(state.LastTimeMicros());
    Result<DispatcherState> unchanged = DispatcherState::FromSnapshot(counters_moved.asReader());
    ASSERT_TRUE(unchanged.ok()) << unchanged.status().ToString();
    const bool snapshot_changed = EncodeMessage(before) != EncodeSnapshot(state);
    const bool digest_changed = unchanged->Digest() != state.Digest();
    ASSERT_EQ(snapshot_changed, digest_changed)
        << VariantName(update.reader().which()) << " (update " << i << ") changed "
        << (snapshot_changed ? "the snapshot but not the digest"
                             : "the digest but not the snapshot");
    if (snapshot_changed) changed.Add(capnp::toDynamic(update.reader()));
  }
  EXPECT_EQ(JoinNames(changed.MissingUnionMembers(NoTransitionMembers())), "")
      << "never changed the snapshot or the digest";
}

TEST(DispatcherStateRandom, EveryUpdateIsRejectedWhenAppliedTwice) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState state;
  for (int i = 0; i < 5000; ++i) {
    OwnedUpdate update = generator.Next(state);
    ASSERT_TRUE(state.Apply(update.reader()).ok());
    const uint64_t digest = state.Digest();
    const Status again = state.Apply(update.reader());
    ASSERT_FALSE(again.ok()) << VariantName(update.reader().which()) << " applied twice (update "
                             << i << ")";
    ASSERT_EQ(state.Digest(), digest)
        << VariantName(update.reader().which()) << ": " << again.ToString();
  }
}

TEST(DispatcherStateRandom, UpdatesValidForAnotherStateAreAppliedWholeOrNotAtAll) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator_a(seed), generator_b(seed ^ 0x5bd1e995u);
  DispatcherState a, b;
  int rejected = 0, accepted = 0;
  for (int i = 0; i < 4000; ++i) {
    // Keep `a` evolving on its own, and feed it what `b` would accept.
    ASSERT_TRUE(a.Apply(generator_a.Next(a).reader()).ok());
    OwnedUpdate foreign = generator_b.Next(b);
    ASSERT_TRUE(b.Apply(foreign.reader()).ok());
    const uint64_t before = a.Digest();
    const Status checked = a.Check(foreign.reader());
    const Status applied = a.Apply(foreign.reader());
    ASSERT_EQ(checked, applied) << "update " << i;
    if (applied.ok()) {
      ++accepted;
      ASSERT_NE(a.Digest(), before);
    } else {
      ++rejected;
      ASSERT_EQ(a.Digest(), before) << "rejected " << VariantName(foreign.reader().which())
                                    << " changed the state: " << applied.ToString();
    }
    if (i % 100 == 0) {
      ASSERT_TRUE(a.CheckIndexes().ok()) << a.CheckIndexes().ToString();
    }
  }
  ASSERT_TRUE(a.CheckIndexes().ok()) << a.CheckIndexes().ToString();
  EXPECT_GT(rejected, 0);
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace dispatch::state
