// RegisterDataset and SetElementSpec: what they change and each rejection;
// plus the update that holds no transition at all.

#include <gtest/gtest.h>

#include "state/dispatcher_state.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

TEST(DispatcherState, EmptyUpdateIsRejected) {
  DispatcherState state;
  EXPECT_TRUE(Rejects(state, OwnedUpdate(), StatusCode::kInvalidArgument, "no transition"));
}

TEST(DispatcherState, RegisteringDatasetAddsItByIdAndFingerprint) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterDataset(3, 0xabc, "key-3", "meta").At(77)));
  const Dataset* dataset = state.FindDataset(3);
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->fingerprint, 0xabcu);
  EXPECT_EQ(dataset->definition_key, "key-3");
  EXPECT_EQ(dataset->metadata, "meta");
  EXPECT_EQ(dataset->registered_micros, 77);
  EXPECT_FALSE(dataset->element_spec.has_value());
  EXPECT_EQ(state.FindDatasetByFingerprint(0xabc), dataset);
  EXPECT_EQ(state.FindDatasetByFingerprint(0xabd), nullptr);
  EXPECT_EQ(state.NextDatasetId(), 4u);
  EXPECT_EQ(state.LastTimeMicros(), 77);
  ASSERT_EQ(state.ListDatasets().size(), 1u);
}

TEST(DispatcherState, GettingUnknownDatasetNamesIt) {
  DispatcherState state;
  Result<const Dataset*> dataset = state.GetDataset(42);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), StatusCode::kNotFound);
  EXPECT_NE(dataset.status().message().find("dataset 42"), std::string::npos);
}

TEST(DispatcherState, RegisteringDatasetRejectsBadIds) {
  DispatcherState state;
  EXPECT_TRUE(Rejects(state, RegisterDataset(0, 1), StatusCode::kInvalidArgument, "dataset id 0"));
  ASSERT_TRUE(Applies(state, RegisterDataset(5, 1)));
  EXPECT_TRUE(Rejects(state, RegisterDataset(5, 2), StatusCode::kAlreadyExists,
                      "dataset 5 already exists"));
  EXPECT_TRUE(
      Rejects(state, RegisterDataset(4, 2), StatusCode::kInvalidArgument, "dataset 4 reuses"));
}

TEST(DispatcherState, RegisteringDatasetRejectsKnownFingerprint) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterDataset(1, 99)));
  EXPECT_TRUE(Rejects(state, RegisterDataset(2, 99), StatusCode::kAlreadyExists,
                      "fingerprint 99 is already registered as dataset 1"));
}

TEST(DispatcherState, RegisteringDatasetRejectsMissingOrTakenDefinitionKey) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterDataset(1, 10, "shared")));
  EXPECT_TRUE(Rejects(state, RegisterDataset(2, 20, "shared"), StatusCode::kAlreadyExists,
                      "belongs to dataset 1"));
  OwnedUpdate no_key = RegisterDataset(2, 20);
  no_key.builder().getRegisterDataset().setDefinitionKey("");
  EXPECT_TRUE(Rejects(state, no_key, StatusCode::kInvalidArgument, "empty definition key"));
}

TEST(DispatcherState, SettingElementSpecRecordsIt) {
  DispatcherState state;
  ASSERT_TRUE(Applies(state, RegisterDataset(1, 10)));
  ASSERT_TRUE(Applies(state, SetElementSpec(1, "spec-bytes")));
  ASSERT_TRUE(state.FindDataset(1)->element_spec.has_value());
  EXPECT_EQ(*state.FindDataset(1)->element_spec, "spec-bytes");
}

TEST(DispatcherState, SettingElementSpecRejectsUnknownDatasetSecondSpecAndEmptySpec) {
  DispatcherState state;
  EXPECT_TRUE(
      Rejects(state, SetElementSpec(8, "x"), StatusCode::kNotFound, "dataset 8 is unknown"));
  ASSERT_TRUE(Applies(state, RegisterDataset(8, 10)));
  EXPECT_TRUE(Rejects(state, SetElementSpec(8, ""), StatusCode::kInvalidArgument, "empty"));
  ASSERT_TRUE(Applies(state, SetElementSpec(8, "a")));
  EXPECT_TRUE(
      Rejects(state, SetElementSpec(8, "b"), StatusCode::kAlreadyExists, "dataset 8 already has"));
  EXPECT_EQ(*state.FindDataset(8)->element_spec, "a");
}

}  // namespace
}  // namespace dispatch::state
