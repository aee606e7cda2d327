#include "tests/state/planner_test_support.h"

#include <memory>
#include <utility>

namespace dispatch::state::testing {

LiveWorker Live(uint64_t id, uint32_t slots, FunctionSet functions) {
  LiveWorker worker;
  worker.worker_id = id;
  worker.slots = slots;
  worker.functions = std::make_shared<const FunctionSet>(std::move(functions));
  return worker;
}

::testing::AssertionResult AppliesAll(DispatcherState& state, const UpdateList& updates) {
  for (size_t i = 0; i < updates.size(); ++i) {
    Status status = state.Apply(updates[i]);
    if (!status.ok())
      return ::testing::AssertionFailure() << "update " << i << ": " << status.ToString();
    status = state.CheckIndexes();
    if (!status.ok())
      return ::testing::AssertionFailure() << "after update " << i << ": " << status.ToString();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace dispatch::state::testing
