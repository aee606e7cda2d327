// Datasets over RPC: registered once per definition (bytes, not identity of
// the caller), the definition, split source and metadata read back, the
// element spec set once, clear errors naming the dataset, and all of it kept
// across a restart.
#include <gtest/gtest.h>
#include <signal.h>

#include "tests/dataservice/ds_test_util.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST(Datasets, SameDefinitionBytesGetTheSameIdAndOtherBytesANewOne) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient a(loop, dispatcher.address());
  DsClient b(loop, dispatcher.address());
  auto first = a.RegisterDataset({.definition = "graph-one"});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto again = b.RegisterDataset({.definition = "graph-one"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  auto other = a.RegisterDataset({.definition = "graph-two"});
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *first);
  EXPECT_EQ(a.ListDatasets()->size(), 2u);
}

// Before, the second registration got the first id back and its split
// source was silently dropped: jobs handed out splits the caller never asked for.
TEST(Datasets, ADefinitionRegisteredAgainWithAnotherSplitSourceOrMetadataNamesBoth) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  const DatasetSpec spec{.definition = "graph", .indexed_splits = 3, .metadata = "m1"};
  auto first = client.RegisterDataset(spec);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto same = client.RegisterDataset(spec);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(*same, *first);

  auto more_splits =
      client.RegisterDataset({.definition = "graph", .indexed_splits = 4, .metadata = "m1"});
  ASSERT_FALSE(more_splits.ok());
  EXPECT_EQ(more_splits.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(more_splits.status(), "dataset " + std::to_string(*first)));
  EXPECT_TRUE(Contains(more_splits.status(), "indexed split source of 3 splits"))
      << more_splits.status().message();
  EXPECT_TRUE(Contains(more_splits.status(), "indexed split source of 4 splits"))
      << more_splits.status().message();

  auto explicit_splits =
      client.RegisterDataset({.definition = "graph", .explicit_splits = {"a", "b"}, .metadata = "m1"});
  ASSERT_FALSE(explicit_splits.ok());
  EXPECT_TRUE(Contains(explicit_splits.status(), "explicit split source of 2 splits"))
      << explicit_splits.status().message();

  auto other_metadata =
      client.RegisterDataset({.definition = "graph", .indexed_splits = 3, .metadata = "m2"});
  ASSERT_FALSE(other_metadata.ok());
  EXPECT_EQ(other_metadata.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(other_metadata.status(), "metadata")) << other_metadata.status().message();

  // Nothing changed: one dataset, still with its first split source.
  EXPECT_EQ(client.ListDatasets()->size(), 1u);
  auto def = client.GetDatasetDef(*first);
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->metadata, "m1");
  EXPECT_EQ(def->num_indexed, 3u);
}

TEST(Datasets, DefinitionSplitSourceAndMetadataReadBack) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  std::string definition(100000, '\0');
  for (size_t i = 0; i < definition.size(); ++i) definition[i] = static_cast<char>(i * 7);
  auto id = client.RegisterDataset({.definition = definition,
                                    .explicit_splits = {"a.tfrecord", "b.tfrecord"},
                                    .metadata = "user bytes"});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto def = client.GetDatasetDef(*id);
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->definition, definition);
  EXPECT_EQ(def->split_kind, rpc::SplitSource::EXPLICIT);
  EXPECT_EQ(def->payloads, (std::vector<std::string>{"a.tfrecord", "b.tfrecord"}));
  EXPECT_EQ(def->metadata, "user bytes");
  EXPECT_EQ(def->incarnation, client.Incarnation());

  auto indexed = client.RegisterDataset({.definition = "indexed", .indexed_splits = 42});
  ASSERT_TRUE(indexed.ok());
  auto indexed_def = client.GetDatasetDef(*indexed);
  ASSERT_TRUE(indexed_def.ok());
  EXPECT_EQ(indexed_def->split_kind, rpc::SplitSource::INDEXED);
  EXPECT_EQ(indexed_def->num_indexed, 42u);
}

TEST(Datasets, ElementSpecIsAClearErrorUntilSetAndIsSetOnce) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto id = client.RegisterDataset({.definition = "no spec"});
  ASSERT_TRUE(id.ok());
  auto missing = client.GetElementSpec(*id);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(
      missing.status().message().find("dataset " + std::to_string(*id) + " has no element spec"),
      std::string::npos)
      << missing.status().message();

  ASSERT_EQ(*client.RegisterDataset({.definition = "no spec", .element_spec = "spec-1"}), *id);
  EXPECT_EQ(*client.GetElementSpec(*id), "spec-1");
  ASSERT_EQ(*client.RegisterDataset({.definition = "no spec", .element_spec = "spec-2"}), *id);
  EXPECT_EQ(*client.GetElementSpec(*id), "spec-1");

  auto with_spec = client.RegisterDataset({.definition = "with spec", .element_spec = "s"});
  EXPECT_EQ(*client.GetElementSpec(*with_spec), "s");
}

TEST(Datasets, UnknownAndEmptyAreClearErrors) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto def = client.GetDatasetDef(77);
  ASSERT_FALSE(def.ok());
  EXPECT_EQ(def.status().code(), StatusCode::kNotFound);
  EXPECT_NE(def.status().message().find("dataset 77"), std::string::npos) << def.status().message();
  auto spec = client.GetElementSpec(78);
  EXPECT_EQ(spec.status().code(), StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find("dataset 78"), std::string::npos);
  auto empty = client.RegisterDataset({.definition = ""});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  auto no_splits = client.RegisterDataset({.definition = "x", .explicit_splits = {}});
  EXPECT_TRUE(no_splits.ok());
}

TEST(Datasets, SurviveARestartOnTheSameWorkDir) {
  TempDir dir;
  uint64_t id;
  {
    DispatcherProcess dispatcher({.work_dir = dir.File("work")});
    ClientLoop loop;
    DsClient client(loop, dispatcher.address());
    id = *client.RegisterDataset(
        {.definition = "durable", .indexed_splits = 9, .element_spec = "es"});
    dispatcher.process().Signal(SIGKILL);
    dispatcher.process().Wait(std::chrono::seconds(10));
  }
  DispatcherProcess dispatcher({.work_dir = dir.File("work")});
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  auto def = client.GetDatasetDef(id);
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->definition, "durable");
  EXPECT_EQ(def->num_indexed, 9u);
  EXPECT_EQ(*client.GetElementSpec(id), "es");
  EXPECT_EQ(*client.RegisterDataset({.definition = "durable", .indexed_splits = 9}), id);
}

}  // namespace
}  // namespace dispatch::testing
