// Task routing by dataset kind (state/task_routing.h): which workers get a
// job's tasks, what a worker registering later gets, the jobs that wait for a
// worker that can produce them, the CreateTask check, and that the kinds
// travel in the journal and snapshots (replay gives the same routing).

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "state/dispatcher_state.h"
#include "state/task_routing.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

const std::vector<std::string> kCppKinds = {"lines", "range", "synthetic"};
const std::vector<std::string> kPythonKinds = {"lines", "python", "range", "synthetic"};

// Dataset 1 of kind "python", dataset 2 of kind "range", dataset 3 with no
// kind; a C++ worker at "cpp" (the reference kinds) and a Python worker at "py".
DispatcherState MixedCluster() {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterDataset(1, 100, "", "", "python")));
  EXPECT_TRUE(Applies(state, RegisterDataset(2, 200, "", "", "range")));
  EXPECT_TRUE(Applies(state, RegisterDataset(3, 300)));
  EXPECT_TRUE(Applies(state, RegisterWorker(1, "cpp", "xcpp", {}, 1, kCppKinds)));
  EXPECT_TRUE(Applies(state, RegisterWorker(2, "py", "xpy", {}, 2, kPythonKinds)));
  return state;
}

JobOptions Dynamic() {
  JobOptions options;
  options.mode = ProcessingMode::DYNAMIC;
  options.num_split_providers = 1;
  return options;
}

std::string SnapshotBytes(const DispatcherState& state) {
  capnp::MallocMessageBuilder message;
  state.WriteSnapshot(message.initRoot<journal::StateSnapshot>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  return std::string(words.asChars().begin(), words.asChars().size());
}

Result<DispatcherState> FromSnapshotBytes(const std::string& bytes) {
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  memcpy(words.begin(), bytes.data(), words.size() * sizeof(capnp::word));
  capnp::FlatArrayMessageReader reader(words);
  return DispatcherState::FromSnapshot(reader.getRoot<journal::StateSnapshot>());
}

TEST(TaskRouting, DatasetKindIsTheFirstWordOfTheDefinition) {
  EXPECT_EQ(DatasetKindOfDefinition("range count=10 splits=2\n", 64), "range");
  EXPECT_EQ(DatasetKindOfDefinition("python fn=AAAA format=pickle\nsplit-a\nsplit-b", 64), "python");
  EXPECT_EQ(DatasetKindOfDefinition(" \t\rlines\nfile-1\n", 64), "lines");
  EXPECT_EQ(DatasetKindOfDefinition("d", 64), "d");
  EXPECT_EQ(DatasetKindOfDefinition("k\xc3\xa9y x=1", 64), "k\xc3\xa9y");
  // No word on the first line, a control byte, or longer than the limit: no kind.
  EXPECT_EQ(DatasetKindOfDefinition("", 64), "");
  EXPECT_EQ(DatasetKindOfDefinition("\nrange count=1", 64), "");
  EXPECT_EQ(DatasetKindOfDefinition(std::string("\x08\x01\x12graph", 8), 64), "");
  EXPECT_EQ(DatasetKindOfDefinition("ran\x7fge", 64), "");
  EXPECT_EQ(DatasetKindOfDefinition("abcdefgh x=1", 8), "abcdefgh");
  EXPECT_EQ(DatasetKindOfDefinition("abcdefghi x=1", 8), "");
}

TEST(TaskRouting, NewJobGetsTasksOnlyOnWorkersProducingItsKind) {
  DispatcherState state = MixedCluster();
  ASSERT_TRUE(Applies(state, RegisterWorker(3, "old", "xold")));  // announces nothing
  ASSERT_TRUE(Applies(state, CreateJob(1, 1, Dynamic())));  // python
  ASSERT_TRUE(Applies(state, CreateJob(2, 2)));             // range
  ASSERT_TRUE(Applies(state, CreateJob(3, 3)));             // no kind
  EXPECT_EQ(WorkersNeedingTask(state, 1), (std::vector<std::string>{"py", "old"}));
  EXPECT_EQ(WorkersNeedingTask(state, 2), (std::vector<std::string>{"cpp", "py", "old"}));
  EXPECT_EQ(WorkersNeedingTask(state, 3), (std::vector<std::string>{"cpp", "py", "old"}));
  EXPECT_FALSE(CanServeJob(state, 1, "cpp"));
  EXPECT_TRUE(CanServeJob(state, 1, "py"));
  EXPECT_TRUE(CanServeJob(state, 1, "old"));
  EXPECT_FALSE(CanServeJob(state, 1, "nobody"));
  EXPECT_FALSE(CanServeJob(state, 9, "py"));
  // A worker holding a task needs no other.
  ASSERT_TRUE(Applies(state, CreateTask(1, 1, "py")));
  EXPECT_EQ(WorkersNeedingTask(state, 1), (std::vector<std::string>{"old"}));
}

TEST(TaskRouting, CreatingTaskOnWorkerWithoutTheKindIsRefused) {
  DispatcherState state = MixedCluster();
  ASSERT_TRUE(Applies(state, CreateJob(1, 1)));
  JobOptions round_robin;
  round_robin.num_consumers = 1;
  ASSERT_TRUE(Applies(state, CreateJob(2, 1, round_robin)));
  EXPECT_TRUE(Rejects(state, CreateTask(1, 1, "cpp"), StatusCode::kFailedPrecondition,
                      "task 1 is for worker address cpp, which announces no dataset kind "
                      "'python' (job 1 reads dataset 1)"));
  EXPECT_TRUE(Rejects(state, CreatePendingTask(1, 2, "cpp", 0), StatusCode::kFailedPrecondition,
                      "announces no dataset kind 'python'"));
  EXPECT_TRUE(Applies(state, CreateTask(1, 1, "py")));
  EXPECT_TRUE(Applies(state, CreatePendingTask(2, 2, "py", 0)));
}

TEST(TaskRouting, WorkerRegisteringLaterGetsOnlyJobsItCanProduce) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterDataset(1, 100, "", "", "python")));
  ASSERT_TRUE(Applies(state, RegisterDataset(2, 200, "", "", "range")));
  ASSERT_TRUE(Applies(state, CreateJob(1, 1)));
  ASSERT_TRUE(Applies(state, CreateJob(2, 2)));
  ASSERT_TRUE(Applies(state, CreateJob(3, 1)));
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "cpp", "xcpp", {}, 1, kCppKinds)));
  EXPECT_EQ(JobsNeedingTask(state, "cpp"), (std::vector<uint64_t>{2}));
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "py", "xpy", {}, 2, {"python"})));
  EXPECT_EQ(JobsNeedingTask(state, "py"), (std::vector<uint64_t>{1, 3}));
  ASSERT_TRUE(Applies(state, RegisterWorker(3, "old", "xold")));
  EXPECT_EQ(JobsNeedingTask(state, "old"), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_TRUE(JobsNeedingTask(state, "nobody").empty());
  ASSERT_TRUE(Applies(state, CreateTask(1, 1, "py")));
  EXPECT_EQ(JobsNeedingTask(state, "py"), (std::vector<uint64_t>{3}));
}

TEST(TaskRouting, JobNoWorkerCanProduceWaitsAndIsCounted) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterDataset(1, 100, "", "", "python")));
  ASSERT_TRUE(Applies(state, RegisterDataset(2, 200, "", "", "range")));
  ASSERT_TRUE(Applies(state, CreateJob(1, 1)));
  ASSERT_TRUE(Applies(state, CreateJob(2, 2)));
  EXPECT_EQ(JobsWithoutWorker(state), 2u);  // no worker at all
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "cpp", "xcpp", {}, 1, kCppKinds)));
  EXPECT_EQ(JobsWithoutWorker(state), 1u);  // the python job waits
  EXPECT_TRUE(WorkersNeedingTask(state, 1).empty());
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "py", "xpy", {}, 2, kPythonKinds)));
  EXPECT_EQ(JobsWithoutWorker(state), 0u);
  EXPECT_EQ(JobsNeedingTask(state, "py"), (std::vector<uint64_t>{1, 2}));
  ASSERT_TRUE(Applies(state, RemoveWorker(2)));
  EXPECT_EQ(JobsWithoutWorker(state), 1u);
  // A worker announcing nothing serves every job, as before kinds.
  ASSERT_TRUE(Applies(state, RegisterWorker(3, "old", "xold")));
  EXPECT_EQ(JobsWithoutWorker(state), 0u);
}

TEST(TaskRouting, KindsTravelInTheJournalAndSnapshotsAndReplayRoutesTheSame) {
  std::vector<OwnedUpdate> journal;
  journal.push_back(RegisterDataset(1, 100, "", "", "python"));
  journal.push_back(RegisterDataset(2, 200, "", "", "range"));
  journal.push_back(RegisterWorker(1, "cpp", "xcpp", {}, 1, kCppKinds));
  journal.push_back(CreateJob(1, 1, Dynamic()));
  journal.push_back(CreateJob(2, 2));
  DispatcherState live;
  for (const OwnedUpdate& update : journal) ASSERT_TRUE(Applies(live, update));
  // Replayed from the journal's bytes: the same state, the same decisions.
  DispatcherState replayed;
  for (const OwnedUpdate& update : journal)
    ASSERT_TRUE(Applies(replayed, OwnedUpdate::FromBytes(update.ToBytes())));
  EXPECT_EQ(replayed.Digest(), live.Digest());
  EXPECT_EQ(replayed.FindDataset(1)->kind, "python");
  EXPECT_EQ(replayed.FindWorker(1)->dataset_kinds,
            (std::set<std::string, std::less<>>(kCppKinds.begin(), kCppKinds.end())));
  EXPECT_EQ(JobsNeedingTask(replayed, "cpp"), (std::vector<uint64_t>{2}));
  EXPECT_EQ(JobsWithoutWorker(replayed), 1u);
  EXPECT_TRUE(Rejects(replayed, CreateTask(1, 1, "cpp"), StatusCode::kFailedPrecondition,
                      "announces no dataset kind 'python'"));
  // Through a snapshot too.
  Result<DispatcherState> restored = FromSnapshotBytes(SnapshotBytes(live));
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->Digest(), live.Digest());
  EXPECT_EQ(JobsNeedingTask(*restored, "cpp"), (std::vector<uint64_t>{2}));
  EXPECT_EQ(JobsWithoutWorker(*restored), 1u);
  // The digest covers the kinds: another kind is another state.
  DispatcherState other;
  ASSERT_TRUE(Applies(other, RegisterDataset(1, 100, "", "", "python")));
  DispatcherState plain;
  ASSERT_TRUE(Applies(plain, RegisterDataset(1, 100)));
  EXPECT_NE(other.Digest(), plain.Digest());
  DispatcherState announcing;
  ASSERT_TRUE(Applies(announcing, RegisterWorker(1, "w", "x", {}, 1, {"range"})));
  DispatcherState silent;
  ASSERT_TRUE(Applies(silent, RegisterWorker(1, "w", "x", {}, 1)));
  EXPECT_NE(announcing.Digest(), silent.Digest());
}

TEST(TaskRouting, RecordsWithoutKindsReplayAsBeforeEveryWorkerEveryJob) {
  // What a journal written before kinds holds: no dataset kind, no worker kinds.
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterDataset(1, 100)));
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a", "xa")));
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "b", "xb")));
  ASSERT_TRUE(Applies(state, CreateJob(1, 1)));
  EXPECT_TRUE(state.FindDataset(1)->kind.empty());
  EXPECT_TRUE(state.FindWorker(1)->dataset_kinds.empty());
  EXPECT_EQ(WorkersNeedingTask(state, 1), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  EXPECT_TRUE(Applies(state, CreateTask(2, 1, "b")));
  EXPECT_EQ(JobsWithoutWorker(state), 0u);
}

TEST(TaskRouting, DynamicSplitsGoOnceEachToTheCapableWorkersTasks) {
  DispatcherState state = MixedCluster();
  ASSERT_TRUE(Applies(state, RegisterWorker(3, "py2", "xpy2", {}, 3, {"python"})));
  ASSERT_TRUE(Applies(state, CreateJob(1, 1, Dynamic())));
  uint64_t task_id = 1;
  std::vector<uint64_t> tasks;
  for (const std::string& address : WorkersNeedingTask(state, 1)) {
    ASSERT_TRUE(Applies(state, CreateTask(task_id, 1, address)));
    tasks.push_back(task_id++);
  }
  ASSERT_EQ(tasks.size(), 2u);  // "py" and "py2", not "cpp"
  EXPECT_EQ(state.FindTaskForJobAndWorker(1, "cpp"), nullptr);
  // Ten splits, asked for in turn by the two tasks: each index exactly once.
  std::vector<uint64_t> handed;
  for (uint64_t index = 0; index < 10; ++index) {
    const uint64_t task = tasks[index % 2];
    ASSERT_TRUE(Applies(state, ProduceSplit(1, 0, 0, task, index + 1, {index}, index == 9)));
    handed.push_back(index);
  }
  EXPECT_EQ(state.FindSplitProvider(1, 0)->repetition, 1);
  EXPECT_EQ(handed.size(), 10u);
}

}  // namespace
}  // namespace dispatch::state
