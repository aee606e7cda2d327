// Snapshots: the round trip keeps the digest and the behaviour; every field of
// the snapshot matters (changing it changes the digest or is refused); broken
// snapshots are refused with DataLoss.

#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "state/dispatcher_state.h"
#include "tests/state/schema_coverage.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"
#include "tests/state/update_generator.h"
#include "tests/support/test_seed.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT

// A state in which every record kind and every optional part is present:
// element spec, tags, named job, requeued splits, pending task with a ready
// client, finished task, split grants, closures in every state, a coordinator
// error.
DispatcherState RichState() {
  DispatcherState s;
  int64_t t = 100;
  auto apply = [&](OwnedUpdate u) { EXPECT_TRUE(Applies(s, std::move(u).At(t += 7))); };
  apply(RegisterDataset(1, 11, "ds-1", "meta-1"));
  apply(SetElementSpec(1, "spec-1"));
  apply(RegisterWorker(1, "a", "xa", {"gpu"}, 41));
  apply(RegisterWorker(2, "b", "xb", {"cpu", "rack-2"}, 42));
  JobOptions dynamic;
  dynamic.mode = ProcessingMode::DYNAMIC;
  dynamic.num_split_providers = 2;
  dynamic.requeue_unfinished_splits = true;
  dynamic.name = NamedJobKey{"train", 3};
  dynamic.target_workers = TargetWorkers::ANY;
  apply(CreateJob(1, 1, dynamic));
  apply(CreateTask(1, 1, "a"));
  apply(CreateTask(2, 1, "b"));
  apply(ProduceSplit(1, 0, 0, 1, 1, {0, 1}));
  apply(ProduceSplit(1, 0, 1, 2, 4, {0}, true));
  apply(ProduceSplit(1, 0, 0, 2, 2, {2}));
  JobOptions round_robin;
  round_robin.mode = ProcessingMode::HINT;
  round_robin.num_consumers = 2;
  apply(CreateJob(2, 1, round_robin));
  apply(AcquireJobClient(1, 2));
  apply(AcquireJobClient(2, 2));
  apply(CreateTask(3, 2, "a"));
  apply(CreatePendingTask(4, 2, "b", 6));
  apply(AcceptPendingTask(1, 4));
  apply(CreateJob(3, 1));
  apply(CreateTask(5, 3, "a"));
  apply(AcquireJobClient(3, 3));
  apply(ReleaseJobClient(3));
  apply(FinishTask(5));
  for (uint64_t id = 1; id <= 6; ++id)
    apply(ScheduleClosure(id, 9, "fn-" + std::to_string(id), "args", 100 + id));
  apply(AssignClosure(1, 1, 1));
  apply(FinishClosure(1, 1, 1, "result"));
  apply(AssignClosure(2, 1, 1));
  apply(FailClosure(2, 1, 1, "boom", true));
  apply(CancelClosure(3));
  apply(AssignClosure(4, 1, 1));
  apply(PutBackClosure(4, 1, 1));
  apply(ScheduleClosureAfter(7, 9, "fn-7", "args", 107, {}, {4}));  // waits for closure 4
  apply(AssignClosure(5, 2, 1));
  apply(CreateResource(1, 9, "make", "resource-args", 77));
  apply(RemoveWorker(1));  // requeues split 0 and 1 of provider 0 (task 1 held them)
  EXPECT_EQ(s.FindSplitProvider(1, 0)->requeued.size(), 2u);
  return s;
}

std::string SnapshotBytes(const DispatcherState& state) {
  capnp::MallocMessageBuilder message;
  state.WriteSnapshot(message.initRoot<journal::StateSnapshot>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  return std::string(words.asChars().begin(), words.asChars().size());
}

Result<DispatcherState> FromBytes(const std::string& bytes) {
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  memcpy(words.begin(), bytes.data(), words.size() * sizeof(capnp::word));
  capnp::FlatArrayMessageReader reader(words);
  return DispatcherState::FromSnapshot(reader.getRoot<journal::StateSnapshot>());
}

TEST(DispatcherStateSnapshot, EmptyStateRoundTrips) {
  DispatcherState empty;
  Result<DispatcherState> restored = FromBytes(SnapshotBytes(empty));
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->Digest(), empty.Digest());
  EXPECT_EQ(restored->NextJobId(), 1u);
}

TEST(DispatcherStateSnapshot, RichStateRoundTripsWithItsQueries) {
  DispatcherState state = RichState();
  Result<DispatcherState> restored = FromBytes(SnapshotBytes(state));
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->Digest(), state.Digest());
  EXPECT_TRUE(restored->CheckIndexes().ok());
  EXPECT_EQ(restored->FindNamedJob(NamedJobKey{"train", 3})->id, 1u);
  EXPECT_EQ(restored->NextQueuedClosure()->id, 6u);
  EXPECT_EQ(restored->PendingTasks(2).size(), 1u);
  EXPECT_EQ(restored->FindCoordinatorError(9)->error, "boom");
  EXPECT_EQ(SnapshotBytes(*restored), SnapshotBytes(state));
}

TEST(DispatcherStateSnapshot, RandomStatesRoundTripAndThenEvolveLikeTheOriginal) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState live;
  for (int round = 0; round < 12; ++round) {
    for (int i = 0; i < 250; ++i) ASSERT_TRUE(live.Apply(generator.Next(live).reader()).ok());
    Result<DispatcherState> restored = FromBytes(SnapshotBytes(live));
    ASSERT_TRUE(restored.ok()) << restored.status().ToString();
    ASSERT_EQ(restored->Digest(), live.Digest()) << "round " << round;
    ASSERT_TRUE(restored->CheckIndexes().ok());
    // The restored state accepts and rejects exactly what the live one does.
    DispatcherState copy = live;
    UpdateGenerator next(seed + round);
    for (int i = 0; i < 100; ++i) {
      OwnedUpdate update = next.Next(copy);
      ASSERT_TRUE(copy.Apply(update.reader()).ok());
      ASSERT_TRUE(restored->Apply(update.reader()).ok()) << "round " << round << " update " << i;
      ASSERT_EQ(restored->Digest(), copy.Digest()) << "round " << round << " update " << i;
    }
  }
}

// The first field in which two snapshots differ, as a path
// ("closures[3].transientFailures"); "" when they are equal. (Snapshots have no
// unions.)
std::string FirstDifference(capnp::DynamicStruct::Reader a, capnp::DynamicStruct::Reader b) {
  for (capnp::StructSchema::Field field : a.getSchema().getFields()) {
    capnp::DynamicValue::Reader x = a.get(field), y = b.get(field);
    if (kj::str(x) == kj::str(y)) continue;
    const std::string name = field.getProto().getName().cStr();
    const capnp::Type type = field.getType();
    if (type.isStruct()) {
      return name + "." +
             FirstDifference(x.as<capnp::DynamicStruct>(), y.as<capnp::DynamicStruct>());
    }
    if (type.isList() && type.asList().getElementType().isStruct()) {
      auto xs = x.as<capnp::DynamicList>(), ys = y.as<capnp::DynamicList>();
      for (unsigned i = 0; i < xs.size() && i < ys.size(); ++i) {
        if (kj::str(xs[i]) == kj::str(ys[i])) continue;
        return name + "[" + std::to_string(i) + "]." +
               FirstDifference(xs[i].as<capnp::DynamicStruct>(), ys[i].as<capnp::DynamicStruct>());
      }
      return name + " (length)";
    }
    return name;
  }
  return "";
}

// Walks the snapshot's schema: every field of every record holds a
// non-default value in some generated state (so WriteSnapshot writes it and
// the generator reaches it), and a restored state writes the same bytes again
// (so FromSnapshot reads every field it writes).
TEST(DispatcherStateSnapshot, GeneratedStatesFillEverySnapshotFieldAndReadBackTheSameBytes) {
  const uint64_t seed = ::dispatch::testing::TestSeed();
  SCOPED_TRACE("DISPATCH_TEST_SEED=" + std::to_string(seed));
  UpdateGenerator generator(seed);
  DispatcherState state;
  SchemaCoverage fields(capnp::Schema::from<journal::StateSnapshot>());
  for (int i = 1; i <= 6000; ++i) {
    ASSERT_TRUE(state.Apply(generator.Next(state).reader()).ok());
    // Long and often: some fields live briefly and seldom (a split is requeued
    // when a worker holding it goes, and handed out again soon after).
    if (i % 5 != 0) continue;
    capnp::MallocMessageBuilder message;
    state.WriteSnapshot(message.initRoot<journal::StateSnapshot>());
    fields.Add(capnp::toDynamic(message.getRoot<journal::StateSnapshot>().asReader()));
    if (i % 50 != 0) continue;
    const std::string bytes = SnapshotBytes(state);
    Result<DispatcherState> restored = FromBytes(bytes);
    ASSERT_TRUE(restored.ok()) << restored.status().ToString();
    if (SnapshotBytes(*restored) == bytes) continue;
    capnp::MallocMessageBuilder again;
    restored->WriteSnapshot(again.initRoot<journal::StateSnapshot>());
    FAIL() << "after update " << i << " a restored state writes another "
           << FirstDifference(
                  capnp::toDynamic(message.getRoot<journal::StateSnapshot>().asReader()),
                  capnp::toDynamic(again.getRoot<journal::StateSnapshot>().asReader()))
           << ": FromSnapshot does not read what WriteSnapshot writes";
  }
  EXPECT_EQ(JoinNames(fields.Missing()), "")
      << "no generated state gives these a non-default value in its snapshot";
}

// ---- Every snapshot field matters --------------------------------------

struct Step {
  std::string field;
  int index = -1;  // element of a list of structs, or -1
};
using Path = std::vector<Step>;

std::string GroupName(const Path& path) {
  std::string name;
  for (const Step& step : path) name += (name.empty() ? "" : ".") + step.field;
  return name;
}

void CollectLeaves(capnp::DynamicStruct::Reader r, const Path& prefix, std::vector<Path>& out) {
  for (capnp::StructSchema::Field field : r.getSchema().getFields()) {
    Path path = prefix;
    path.push_back(Step{field.getProto().getName(), -1});
    capnp::Type type = field.getType();
    if (type.isStruct()) {
      CollectLeaves(r.get(field).as<capnp::DynamicStruct>(), path, out);
    } else if (type.isList() && type.asList().getElementType().isStruct()) {
      auto list = r.get(field).as<capnp::DynamicList>();
      for (unsigned i = 0; i < list.size(); ++i) {
        path.back().index = static_cast<int>(i);
        CollectLeaves(list[i].as<capnp::DynamicStruct>(), path, out);
      }
    } else {
      out.push_back(path);
    }
  }
}

void Mutate(capnp::DynamicStruct::Builder root, const Path& path) {
  capnp::DynamicStruct::Builder cur = root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    capnp::DynamicValue::Builder v = cur.get(path[i].field);
    cur = path[i].index >= 0 ? v.as<capnp::DynamicList>()[path[i].index].as<capnp::DynamicStruct>()
                             : v.as<capnp::DynamicStruct>();
  }
  const std::string& name = path.back().field;
  capnp::Type type = cur.getSchema().getFieldByName(name).getType();
  if (type.isBool()) {
    cur.set(name, !cur.get(name).as<bool>());
  } else if (type.isInt8() || type.isInt16() || type.isInt32() || type.isInt64()) {
    cur.set(name, cur.get(name).as<int64_t>() + 1);
  } else if (type.isUInt8() || type.isUInt16() || type.isUInt32() || type.isUInt64()) {
    cur.set(name, cur.get(name).as<uint64_t>() + 1);
  } else if (type.isEnum()) {
    capnp::DynamicEnum e = cur.get(name).as<capnp::DynamicEnum>();
    cur.set(name, capnp::DynamicEnum(e.getSchema(), static_cast<uint16_t>(e.getRaw() + 1)));
  } else if (type.isText()) {
    std::string text = cur.get(name).as<capnp::Text>().asString().cStr();
    text += "~";
    cur.set(name, capnp::Text::Reader(text.c_str(), text.size()));
  } else if (type.isData()) {
    auto data = cur.get(name).as<capnp::Data>();
    std::vector<capnp::byte> bytes(data.begin(), data.end());
    bytes.push_back(0x5a);
    cur.set(name, capnp::Data::Reader(bytes.data(), bytes.size()));
  } else if (type.isList()) {
    // A list of numbers or text: one more element.
    std::vector<std::string> texts;
    std::vector<uint64_t> numbers;
    const bool is_text = type.asList().getElementType().isText();
    auto old_list = cur.get(name).as<capnp::DynamicList>();
    for (unsigned i = 0; i < old_list.size(); ++i) {
      if (is_text) {
        texts.push_back(old_list[i].as<capnp::Text>().asString().cStr());
      } else {
        numbers.push_back(old_list[i].as<uint64_t>());
      }
    }
    const unsigned size = static_cast<unsigned>(is_text ? texts.size() : numbers.size()) + 1;
    auto list = cur.init(name, size).as<capnp::DynamicList>();
    for (unsigned i = 0; i + 1 < size; ++i) {
      if (is_text) {
        list.set(i, capnp::Text::Reader(texts[i].c_str(), texts[i].size()));
      } else {
        list.set(i, numbers[i]);
      }
    }
    if (is_text) {
      list.set(size - 1, capnp::Text::Reader("extra"));
    } else {
      list.set(size - 1, static_cast<uint64_t>(1u << 20));
    }
  } else {
    FAIL() << "no mutation for " << GroupName(path);
  }
}

TEST(DispatcherStateSnapshot, ChangingAnySnapshotFieldChangesTheDigestOrIsRefused) {
  DispatcherState state = RichState();
  capnp::MallocMessageBuilder original;
  state.WriteSnapshot(original.initRoot<journal::StateSnapshot>());
  const auto root = original.getRoot<journal::StateSnapshot>().asReader();
  std::vector<Path> leaves;
  CollectLeaves(capnp::toDynamic(root), {}, leaves);
  ASSERT_GT(leaves.size(), 100u);

  // A field may be irrelevant in one record (the name of an unnamed job) but
  // must matter in at least one.
  std::map<std::string, bool> detected;
  for (const Path& path : leaves) {
    capnp::MallocMessageBuilder copy;
    copy.setRoot(root);
    Mutate(capnp::toDynamic(copy.getRoot<journal::StateSnapshot>()), path);
    Result<DispatcherState> restored =
        DispatcherState::FromSnapshot(copy.getRoot<journal::StateSnapshot>().asReader());
    const bool noticed = !restored.ok() || restored->Digest() != state.Digest();
    detected[GroupName(path)] = detected[GroupName(path)] || noticed;
  }
  for (const auto& [group, noticed] : detected) {
    EXPECT_TRUE(noticed) << group << " is ignored";
  }
}

// Walks the snapshot's schema, so a collection or counter added later cannot
// be missed by the reset: every list must be non-empty in RichState (add a
// record of a new kind there) and empty after the reset; every other field
// must differ from a fresh state's in RichState and be kept by the reset.
TEST(DispatcherStateSnapshot, EmptyKeepingCountersForgetsEveryCollectionAndKeepsEveryCounter) {
  const DispatcherState state = RichState();
  const DispatcherState reset = state.EmptyKeepingCounters();
  capnp::MallocMessageBuilder rich_message, reset_message, fresh_message;
  state.WriteSnapshot(rich_message.initRoot<journal::StateSnapshot>());
  reset.WriteSnapshot(reset_message.initRoot<journal::StateSnapshot>());
  DispatcherState().WriteSnapshot(fresh_message.initRoot<journal::StateSnapshot>());
  auto rich = capnp::toDynamic(rich_message.getRoot<journal::StateSnapshot>().asReader());
  auto after = capnp::toDynamic(reset_message.getRoot<journal::StateSnapshot>().asReader());
  auto fresh = capnp::toDynamic(fresh_message.getRoot<journal::StateSnapshot>().asReader());

  for (capnp::StructSchema::Field field : rich.getSchema().getFields()) {
    const std::string name = field.getProto().getName().cStr();
    if (field.getType().isList()) {
      EXPECT_GT(rich.get(field).as<capnp::DynamicList>().size(), 0u)
          << name << " is empty in RichState: add a record of it there";
      EXPECT_EQ(after.get(field).as<capnp::DynamicList>().size(), 0u) << name << " survived the reset";
      continue;
    }
    const std::string kept = kj::str(after.get(field)).cStr();
    if (name != "formatVersion") {
      EXPECT_NE(std::string(kj::str(rich.get(field)).cStr()), std::string(kj::str(fresh.get(field)).cStr()))
          << name << " has its fresh value in RichState, so the test cannot see it kept";
    }
    EXPECT_EQ(kept, std::string(kj::str(rich.get(field)).cStr())) << name << " was not kept";
  }
  EXPECT_TRUE(reset.CheckIndexes().ok());
  Result<DispatcherState> restored = FromBytes(SnapshotBytes(reset));
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->Digest(), reset.Digest());
}

// ---- Broken snapshots ---------------------------------------------------

TEST(DispatcherStateSnapshot, FromSnapshotRefusesAnotherFormat) {
  capnp::MallocMessageBuilder message;
  auto snapshot = message.initRoot<journal::StateSnapshot>();
  RichState().WriteSnapshot(snapshot);
  snapshot.setFormatVersion(2);
  Result<DispatcherState> restored = DispatcherState::FromSnapshot(snapshot.asReader());
  ASSERT_FALSE(restored.ok());
  EXPECT_EQ(restored.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(restored.status().message().find("snapshot format 2"), std::string::npos);
}

TEST(DispatcherStateSnapshot, FromSnapshotRefusesDuplicateIds) {
  capnp::MallocMessageBuilder message;
  auto snapshot = message.initRoot<journal::StateSnapshot>();
  RichState().WriteSnapshot(snapshot);
  snapshot.getJobs()[1].setJobId(snapshot.getJobs()[0].getJobId());
  Result<DispatcherState> restored = DispatcherState::FromSnapshot(snapshot.asReader());
  ASSERT_FALSE(restored.ok());
  EXPECT_EQ(restored.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(restored.status().message().find("job 1 twice"), std::string::npos)
      << restored.status().ToString();
}

// A closure state from a damaged snapshot would index the per-state tallies.
TEST(DispatcherStateSnapshot, FromSnapshotRefusesAClosureInAStateTheSchemaDoesNotKnow) {
  capnp::MallocMessageBuilder message;
  auto snapshot = message.initRoot<journal::StateSnapshot>();
  RichState().WriteSnapshot(snapshot);
  ASSERT_GT(snapshot.getClosures().size(), 0u);
  snapshot.getClosures()[0].setState(static_cast<ClosureState>(kClosureStateCount));
  Result<DispatcherState> restored = DispatcherState::FromSnapshot(snapshot.asReader());
  ASSERT_FALSE(restored.ok());
  EXPECT_EQ(restored.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(restored.status().message().find("unknown state 6"), std::string::npos)
      << restored.status().ToString();
}

TEST(DispatcherStateSnapshot, FromSnapshotRefusesMoreSplitProvidersThanAJobMayHave) {
  capnp::MallocMessageBuilder message;
  auto snapshot = message.initRoot<journal::StateSnapshot>();
  RichState().WriteSnapshot(snapshot);
  // A DYNAMIC job (it has providers): one more than the limit costs the
  // encoding almost nothing, and used to be built before any check.
  int dynamic = -1;
  for (unsigned i = 0; i < snapshot.getJobs().size(); ++i) {
    if (snapshot.getJobs()[i].getProviders().size() > 0) dynamic = static_cast<int>(i);
  }
  ASSERT_GE(dynamic, 0) << "RichState has no DYNAMIC job";
  snapshot.getJobs()[dynamic].initProviders(kMaxSplitProviders + 1);
  Result<DispatcherState> restored = DispatcherState::FromSnapshot(snapshot.asReader());
  ASSERT_FALSE(restored.ok());
  EXPECT_EQ(restored.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(restored.status().message().find("split providers, more than 4096"), std::string::npos)
      << restored.status().ToString();
}

TEST(DispatcherStateSnapshot, FromSnapshotRefusesDanglingReferences) {
  {
    capnp::MallocMessageBuilder message;
    auto snapshot = message.initRoot<journal::StateSnapshot>();
    RichState().WriteSnapshot(snapshot);
    snapshot.getTasks()[0].setJobId(77);
    Result<DispatcherState> restored = DispatcherState::FromSnapshot(snapshot.asReader());
    ASSERT_FALSE(restored.ok());
    EXPECT_EQ(restored.status().code(), StatusCode::kDataLoss);
  }
  {
    capnp::MallocMessageBuilder message;
    auto snapshot = message.initRoot<journal::StateSnapshot>();
    RichState().WriteSnapshot(snapshot);
    snapshot.getWorkers()[0].setWorkerId(99);  // worker 2 runs closure 5
    snapshot.setNextWorkerId(100);
    Result<DispatcherState> restored = DispatcherState::FromSnapshot(snapshot.asReader());
    ASSERT_FALSE(restored.ok());
    EXPECT_NE(restored.status().message().find("closure 5 is assigned to unknown worker 2"),
              std::string::npos)
        << restored.status().ToString();
  }
}

}  // namespace
}  // namespace dispatch::state
