#include "tests/state/state_matchers.h"

#include <string>

namespace dispatch::state::testing {

::testing::AssertionResult Applies(DispatcherState& state, const OwnedUpdate& update) {
  const Status status = state.Apply(update.reader());
  if (!status.ok()) {
    return ::testing::AssertionFailure()
           << VariantName(update.reader().which()) << " was rejected: " << status.ToString();
  }
  const Status indexes = state.CheckIndexes();
  if (!indexes.ok()) {
    return ::testing::AssertionFailure()
           << "after " << VariantName(update.reader().which()) << ": " << indexes.ToString();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Rejects(DispatcherState& state, const OwnedUpdate& update,
                                   StatusCode code, std::string_view needle) {
  const uint64_t before = state.Digest();
  const Status checked = state.Check(update.reader());
  const Status applied = state.Apply(update.reader());
  if (applied.ok()) {
    return ::testing::AssertionFailure() << VariantName(update.reader().which()) << " was applied";
  }
  if (checked != applied) {
    return ::testing::AssertionFailure()
           << "Check said " << checked.ToString() << " but Apply said " << applied.ToString();
  }
  if (applied.code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << StatusCodeName(code) << ", got " << applied.ToString();
  }
  if (applied.message().find(needle) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message '" << applied.message() << "' lacks '" << needle << "'";
  }
  if (state.Digest() != before)
    return ::testing::AssertionFailure() << "the rejected update changed the state";
  const Status indexes = state.CheckIndexes();
  if (!indexes.ok())
    return ::testing::AssertionFailure() << "after rejection: " << indexes.ToString();
  return ::testing::AssertionSuccess() << applied.ToString();
}

std::vector<uint64_t> Ids(const std::vector<const Closure*>& closures) {
  std::vector<uint64_t> ids;
  for (const Closure* c : closures) ids.push_back(c->id);
  return ids;
}

DispatcherState DependencyChain() {
  DispatcherState state;
  EXPECT_TRUE(Applies(state, RegisterWorker(1, "a")));
  EXPECT_TRUE(Applies(state, ScheduleClosure(1, 7, "sum")));
  EXPECT_TRUE(Applies(state, ScheduleClosureAfter(2, 7, "sum", "", 0, {}, {1})));
  EXPECT_TRUE(Applies(state, ScheduleClosureAfter(3, 7, "sum", "", 0, {}, {2})));
  return state;
}

}  // namespace dispatch::state::testing
