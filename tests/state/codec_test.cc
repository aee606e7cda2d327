// Encoded journal records and snapshots: replay from bytes reproduces the
// digest; damaged bytes are refused (DataLoss or a Check error), never crash,
// and change nothing.

#include "state/codec.h"

#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <capnp/schema.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "state/dispatcher_state.h"
#include "tests/state/schema_coverage.h"
#include "tests/state/update_builders.h"
#include "tests/state/update_generator.h"
#include "tests/support/test_seed.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT

// The canonical form of an update: equal for equal contents, whatever the
// layout of the message holding it.
std::string Canonical(const OwnedUpdate& update) {
  kj::Array<capnp::word> words = capnp::canonicalize(update.reader());
  return std::string(words.asChars().begin(), words.asChars().size());
}

TEST(StateCodec, EncodedUpdatesReplayToTheSameDigest) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState live, replayed;
  SchemaCoverage replayed_kinds(capnp::Schema::from<journal::Update>());
  for (int i = 0; i < 2000; ++i) {
    OwnedUpdate update = generator.Next(live);
    ASSERT_TRUE(live.Apply(update.reader()).ok());
    const std::string bytes = update.ToBytes();
    ASSERT_TRUE(CheckEncodedUpdate(replayed, bytes).ok());
    const Status applied = ApplyEncodedUpdate(replayed, bytes);
    ASSERT_TRUE(applied.ok()) << applied.ToString();
    OwnedUpdate decoded = OwnedUpdate::FromBytes(bytes);
    ASSERT_EQ(Canonical(decoded), Canonical(update)) << VariantName(update.reader().which());
    replayed_kinds.Add(capnp::toDynamic(decoded.reader()));
  }
  EXPECT_EQ(replayed.Digest(), live.Digest());
  EXPECT_EQ(JoinNames(replayed_kinds.MissingUnionMembers(NoTransitionMembers())), "")
      << "never went through the codec";
}

// Every variant has builders (BuilderExamples does not compile without one),
// they make the variant they are for, fill every field of it and of its nested
// unions, and their updates survive encoding and decoding.
TEST(StateCodec, EveryVariantHasBuildersThatFillEveryFieldAndRoundTrip) {
  SchemaCoverage fields(capnp::Schema::from<journal::Update>());
  for (journal::Update::Which which : AllTransitionVariants()) {
    std::vector<OwnedUpdate> examples = BuilderExamples(which);
    EXPECT_FALSE(examples.empty()) << VariantName(which) << " has no builder example";
    for (const OwnedUpdate& example : examples) {
      EXPECT_EQ(example.reader().which(), which)
          << "an example of " << VariantName(which) << " is a "
          << VariantName(example.reader().which());
      OwnedUpdate decoded = OwnedUpdate::FromBytes(example.ToBytes());
      EXPECT_EQ(Canonical(decoded), Canonical(example)) << VariantName(which);
      fields.Add(capnp::toDynamic(decoded.reader()));
    }
  }
  EXPECT_EQ(JoinNames(fields.Missing(NoTransitionMembers())), "")
      << "no builder example gives these a non-default value (update_builders.cc)";
}

TEST(StateCodec, MalformedUpdateBytesAreRefusedWithDataLoss) {
  DispatcherState state;
  const uint64_t digest = state.Digest();
  const std::string good = RegisterWorker(1, "a").ToBytes();
  for (const std::string& bad : {std::string(), good.substr(0, good.size() - 3), good.substr(0, 8),
                                 good + std::string(8, '\0'), std::string(64, '\xff')}) {
    const Status status = ApplyEncodedUpdate(state, bad);
    EXPECT_EQ(status.code(), StatusCode::kDataLoss)
        << bad.size() << " bytes: " << status.ToString();
  }
  EXPECT_EQ(state.Digest(), digest);
  EXPECT_TRUE(ApplyEncodedUpdate(state, good).ok());
}

TEST(StateCodec, UpdateFromANewerSchemaIsRefusedAndNamesItsVariant) {
  // Write a discriminant this code does not know into a well-formed message:
  // one segment, so the root struct's data section starts at byte 16.
  std::string bytes = FinishTask(1).ToBytes();
  const uint32_t offset =
      capnp::Schema::from<journal::Update>().getProto().getStruct().getDiscriminantOffset();
  const uint16_t unknown = 999;
  ASSERT_LT(16 + offset * 2 + 2, bytes.size());
  memcpy(&bytes[16 + offset * 2], &unknown, sizeof(unknown));
  DispatcherState state;
  const uint64_t digest = state.Digest();
  const Status status = ApplyEncodedUpdate(state, bytes);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("unknown transition 999"), std::string::npos)
      << status.ToString();
  EXPECT_EQ(state.Digest(), digest);
}

TEST(StateCodec, FlippedBytesNeverCrashAndRejectionsChangeNothing) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  UpdateGenerator generator(seed);
  DispatcherState state;
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    OwnedUpdate update = generator.Next(state);
    std::string bytes = update.ToBytes();
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f)
      bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
    DispatcherState copy = state;
    const Status damaged = ApplyEncodedUpdate(copy, bytes);
    if (!damaged.ok()) {
      ++refused;
      ASSERT_EQ(copy.Digest(), state.Digest()) << damaged.ToString();
    }
    ASSERT_TRUE(copy.CheckIndexes().ok()) << copy.CheckIndexes().ToString();
    // Carry on with the intact update so the state keeps growing.
    ASSERT_TRUE(state.Apply(update.reader()).ok());
  }
  EXPECT_GT(refused, 0);
}

TEST(StateCodec, SnapshotBytesRoundTripAndDamagedOnesAreRefused) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState state;
  for (int i = 0; i < 1500; ++i) ASSERT_TRUE(state.Apply(generator.Next(state).reader()).ok());
  const std::string bytes = EncodeSnapshot(state);
  Result<DispatcherState> restored = DecodeSnapshot(bytes);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->Digest(), state.Digest());

  Result<DispatcherState> truncated =
      DecodeSnapshot(std::string_view(bytes).substr(0, bytes.size() / 2 / 8 * 8));
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);

  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200; ++i) {
    std::string damaged = bytes;
    damaged[rng() % damaged.size()] ^= static_cast<char>(1 + rng() % 255);
    Result<DispatcherState> result = DecodeSnapshot(damaged);  // must not crash
    if (result.ok()) {
      EXPECT_TRUE(result->CheckIndexes().ok());
    }
  }
}

// The reusing encoder: the first call (no memory yet), a second of the same
// state (in the kept memory, which must have been zeroed again), one of a
// state that outgrew it, and one of a smaller state, each decode to the state
// they encoded.
TEST(StateCodec, ASnapshotEncoderReusingItsMemoryEncodesEveryStateExactly) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  SnapshotEncoder encoder;
  auto expect_round_trip = [&](const DispatcherState& state, const char* when) {
    std::string bytes(encoder.Encode(state));
    Result<DispatcherState> restored = DecodeSnapshot(bytes);
    ASSERT_TRUE(restored.ok()) << when << ": " << restored.status().ToString();
    EXPECT_EQ(restored->Digest(), state.Digest()) << when;
  };
  DispatcherState state;
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(state.Apply(generator.Next(state).reader()).ok());
  expect_round_trip(state, "first");
  expect_round_trip(state, "again, in kept memory");
  const DispatcherState smaller = state;
  for (int i = 0; i < 3000; ++i) ASSERT_TRUE(state.Apply(generator.Next(state).reader()).ok());
  expect_round_trip(state, "grown past the kept memory");
  expect_round_trip(state, "grown, again");
  expect_round_trip(smaller, "smaller");
  expect_round_trip(DispatcherState(), "empty");
}

}  // namespace
}  // namespace dispatch::state
