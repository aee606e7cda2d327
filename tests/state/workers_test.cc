// RegisterWorker and RemoveWorker: what they change and each rejection.

#include <gtest/gtest.h>

#include "state/dispatcher_state.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

TEST(DispatcherState, RegisteringWorkerMakesItFindableByIdAndAddress) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "w:1", "w:2", {"gpu", "rack-1"}, 555).At(9)));
  const Worker* worker = state.FindWorker(2);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(state.FindWorkerByAddress("w:1"), worker);
  EXPECT_EQ(worker->transfer_address, "w:2");
  EXPECT_EQ(worker->tags, (std::vector<std::string>{"gpu", "rack-1"}));
  EXPECT_EQ(worker->incarnation, 555u);
  EXPECT_EQ(worker->registered_micros, 9);
  EXPECT_EQ(state.NextWorkerId(), 3u);
  EXPECT_EQ(state.ListWorkers().size(), 1u);
}

TEST(DispatcherState, RegisteringWorkerRejectsBadIdsAndAddresses) {
  DispatcherState state;
  EXPECT_TRUE(Rejects(state, RegisterWorker(0, "a"), StatusCode::kInvalidArgument, "worker id 0"));
  EXPECT_TRUE(Rejects(state, RegisterWorker(1, ""), StatusCode::kInvalidArgument,
                      "worker 1 has an empty address"));
  ASSERT_TRUE(Applies(state, RegisterWorker(4, "a")));
  EXPECT_TRUE(Rejects(state, RegisterWorker(4, "b"), StatusCode::kAlreadyExists,
                      "worker 4 already exists"));
  EXPECT_TRUE(
      Rejects(state, RegisterWorker(3, "b"), StatusCode::kInvalidArgument, "worker 3 reuses"));
  EXPECT_TRUE(Rejects(state, RegisterWorker(5, "a"), StatusCode::kAlreadyExists,
                      "address a is already registered by worker 4"));
}

TEST(DispatcherState, RemovingWorkerFreesItsAddressButKeepsItsTasks) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterDataset(1, 1)));
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a", "xa")));
  ASSERT_TRUE(Applies(state, CreateJob(1, 1)));
  ASSERT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  EXPECT_EQ(state.FindWorker(1), nullptr);
  EXPECT_EQ(state.FindWorkerByAddress("a"), nullptr);
  ASSERT_EQ(state.TasksForWorker("a").size(), 1u);
  // The worker comes back at the same address under a new id: its task is there.
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "a", "xa")));
  ASSERT_EQ(state.TasksForWorker("a").size(), 1u);
  EXPECT_EQ(state.TasksForWorker("a")[0]->id, 1u);
}

TEST(DispatcherState, ReturningWorkerGivesItsUnfinishedTasksItsNewTransferAddress) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterDataset(1, 1)));
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a", "old")));
  ASSERT_TRUE(Applies(state, CreateJob(1, 1)));
  ASSERT_TRUE(Applies(state, CreateJob(2, 1)));
  ASSERT_TRUE(Applies(state, CreateTask(1, 1, "a")));
  ASSERT_TRUE(Applies(state, CreateTask(2, 2, "a")));
  ASSERT_TRUE(Applies(state, FinishTask(2)));
  ASSERT_TRUE(Applies(state, RemoveWorker(1)));
  ASSERT_TRUE(Applies(state, RegisterWorker(2, "a", "new")));
  EXPECT_EQ(state.FindTask(1)->transfer_address, "new");
  EXPECT_EQ(state.FindTask(2)->transfer_address, "old");  // finished: history stays
}

TEST(DispatcherState, RemovingWorkerRejectsUnknownWorker) {
  DispatcherState state;
  EXPECT_TRUE(Rejects(state, RemoveWorker(6), StatusCode::kNotFound, "worker 6 is unknown"));
  ASSERT_TRUE(Applies(state, RegisterWorker(6, "a")));
  ASSERT_TRUE(Applies(state, RemoveWorker(6)));
  EXPECT_TRUE(Rejects(state, RemoveWorker(6), StatusCode::kNotFound, "worker 6 is unknown"));
}

TEST(DispatcherState, RemovingWorkerRejectsWorkerThatRunsClosure) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterWorker(1, "a")));
  ASSERT_TRUE(Applies(state, ScheduleClosure(7, 1)));
  ASSERT_TRUE(Applies(state, AssignClosure(7, 1, 1)));
  EXPECT_TRUE(Rejects(state, RemoveWorker(1), StatusCode::kFailedPrecondition,
                      "worker 1 still runs closure 7"));
  ASSERT_TRUE(Applies(state, PutBackClosure(7, 1, 1)));
  EXPECT_TRUE(Applies(state, RemoveWorker(1)));
}

}  // namespace
}  // namespace dispatch::state
