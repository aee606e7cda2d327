// Per-worker resources: every worker builds its own component (once per
// process) as soon as the resource exists or the worker joins, and closures
// that list the resource receive their worker's component; a worker
// restarted after a kill -9 rebuilds it; a failing builder fails the closure
// with an error naming the resource; a retried creation is the same resource.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "tests/closures/closure_test_support.h"

namespace dispatch::testing {
namespace {

using clients::RemoteValue;

// Runs use_resource closures until `want` distinct components were seen.
std::set<std::string> ComponentsSeen(clients::Coordinator& coordinator, uint64_t resource,
                                     size_t want) {
  std::set<std::string> seen;
  EXPECT_TRUE(WaitUntil([&] {
    // A batch at a time: with two slots each, both workers get some.
    std::vector<RemoteValue> batch;
    for (int i = 0; i < 4; ++i)
      batch.push_back(*coordinator.Schedule("use_resource", "", {resource}));
    for (auto& value : batch) seen.insert(FetchOrDie(value));
    return seen.size() >= want;
  })) << "saw "
      << seen.size() << " components";
  return seen;
}

TEST(ClosureResources, EveryWorkerBuildsItsOwnComponent) {
  ClosureDispatcher dispatcher;
  auto a = StartClosureWorker(dispatcher.address(), 2);
  auto b = StartClosureWorker(dispatcher.address(), 2);
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto resource = coordinator->CreatePerWorkerResource("make_resource", "model");
  ASSERT_TRUE(resource.ok()) << resource.status().ToString();
  std::set<std::string> seen = ComponentsSeen(*coordinator, *resource, 2);
  EXPECT_EQ(seen, (std::set<std::string>{
                      "model@" + a->address() + "#" + std::to_string(a->process().pid()),
                      "model@" + b->address() + "#" + std::to_string(b->process().pid())}));
}

// The lines log_resource appended to `path`: one per build, "ADDRESS#PID".
std::multiset<std::string> BuildsLogged(const std::string& path) {
  std::multiset<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.insert(line);
  return lines;
}

std::string BuilderOf(WorkerProcess& worker) {
  return worker.address() + "#" + std::to_string(worker.process().pid());
}

TEST(ClosureResources, EveryWorkerBuildsItWithoutAClosureAlsoWhenItJoinsOrRestarts) {
  TempDir dir;
  const std::string log = dir.File("builds");
  // Restarted at its address: a Unix socket, which no one takes meanwhile.
  const std::string a_address = "unix:" + dir.File("a.sock");
  ClosureDispatcher dispatcher;
  auto a = StartClosureWorker(dispatcher.address(), 1, a_address);
  auto b = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto resource = coordinator->CreatePerWorkerResource("log_resource", log);
  ASSERT_TRUE(resource.ok()) << resource.status().ToString();
  // No closure uses it, yet both workers build it, once each.
  std::multiset<std::string> expected = {BuilderOf(*a), BuilderOf(*b)};
  EXPECT_TRUE(WaitUntil([&] { return BuildsLogged(log) == expected; }));

  // A worker that joins later builds it too.
  auto c = StartClosureWorker(dispatcher.address());
  expected.insert(BuilderOf(*c));
  EXPECT_TRUE(WaitUntil([&] { return BuildsLogged(log) == expected; }));

  // So does a worker process that replaced a killed one.
  a->Kill9();
  a = StartClosureWorker(dispatcher.address(), 1, a_address);
  expected.insert(BuilderOf(*a));
  EXPECT_TRUE(WaitUntil([&] { return BuildsLogged(log) == expected; }));
  // And a closure that uses it gets the component already built: no new line.
  auto value = coordinator->Schedule("use_resource", "", {*resource});
  ASSERT_TRUE(value.ok());
  std::string component = FetchOrDie(*value);
  EXPECT_TRUE(expected.contains(component)) << component;
  EXPECT_EQ(BuildsLogged(log), expected);
}

TEST(ClosureResources, AWorkerRestartedAfterAKillRebuildsItsComponent) {
  TempDir dir;
  const std::string address = "unix:" + dir.File("worker.sock");
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 1, address);
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto resource = coordinator->CreatePerWorkerResource("make_resource", "table");
  ASSERT_TRUE(resource.ok()) << resource.status().ToString();
  auto before = coordinator->Schedule("use_resource", "", {*resource});
  ASSERT_TRUE(before.ok());
  std::string first_pid = std::to_string(worker->process().pid());
  EXPECT_EQ(FetchOrDie(*before), "table@" + address + "#" + first_pid);
  worker->Kill9();
  worker = StartClosureWorker(dispatcher.address(), 1, address);
  auto after = coordinator->Schedule("use_resource", "", {*resource});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(FetchOrDie(*after), "table@" + address + "#" + std::to_string(worker->process().pid()));
}

TEST(ClosureResources, AFailingBuilderFailsTheClosureNamingTheResource) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto resource = coordinator->CreatePerWorkerResource("fail", "no model here");
  ASSERT_TRUE(resource.ok()) << resource.status().ToString();
  auto value = coordinator->Schedule("use_resource", "", {*resource});
  ASSERT_TRUE(value.ok());
  auto fetched = value->FetchFor(kFetchDeadline);
  ASSERT_FALSE(fetched.ok());
  const std::string& message = fetched.status().message();
  EXPECT_NE(message.find("per-worker resource " + std::to_string(*resource)), std::string::npos)
      << message;
  EXPECT_NE(message.find("no model here"), std::string::npos) << message;
}

// Issue 12: per-worker resources were sent to a worker in one message, so
// six of 12 MiB (72 MiB) passed its message limit: the connection closed,
// the worker came back and got the same message again, and nothing ran.
TEST(ClosureResources, ManyLargeResourcesReachAWorkerInMessagesItCanRead) {
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<clients::ResourceId> resources;
  for (char c : {'a', 'b', 'c', 'd', 'e', 'f'}) {
    auto resource = coordinator->CreatePerWorkerResource("make_resource", std::string(12u << 20, c));
    ASSERT_TRUE(resource.ok()) << resource.status().ToString();
    resources.push_back(*resource);
  }
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  auto value = coordinator->Schedule("noop", "", resources);
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(FetchOrDie(*value), "");
}

}  // namespace
}  // namespace dispatch::testing
