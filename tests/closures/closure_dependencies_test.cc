// Closure dependencies with real processes (ScheduleOptions.inputs): a chain
// of 1,000 closures, each summing the previous one's result, ends with the
// right value; a failed input fails its dependants naming it (and is the
// only first error); a dispatcher killed -9 in the middle of a chain
// continues it after a restart; an input released (fetched) while its
// dependant waits is kept until the dependant ran; inputs over one push fail
// their dependant with ResourceExhausted naming the limit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/closures/closure_test_support.h"

namespace dispatch::testing {
namespace {

using clients::RemoteValue;
using clients::RemoteValueStatus;
using clients::ScheduleOptions;

bool AllAcknowledged(const std::vector<RemoteValue>& values) {
  for (const RemoteValue& v : values) {
    if (v.closure_id() == 0) return false;
  }
  return true;
}

// A chain of `n` "sum 1" closures, each taking the previous one's result.
std::vector<RemoteValue> ScheduleChain(clients::Coordinator& coordinator, int n) {
  std::vector<RemoteValue> chain;
  for (int i = 0; i < n; ++i) {
    auto value = coordinator.Schedule(
        "sum", "1", chain.empty() ? ScheduleOptions{} : After({chain.back()}));
    EXPECT_TRUE(value.ok()) << value.status().ToString();
    if (!value.ok()) break;
    chain.push_back(*value);
  }
  return chain;
}

TEST(ClosureDependencies, AChainOfAThousandClosuresEndsWithTheRightValue) {
  constexpr int kChain = 1000;
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<RemoteValue> chain = ScheduleChain(*coordinator, kChain);
  ASSERT_EQ(chain.size(), static_cast<size_t>(kChain));
  ASSERT_TRUE(WaitUntil([&] { return AllAcknowledged(chain); }));
  // Before any worker: one queued, the rest waiting (not runnable).
  ClosureCounters before = GetClosureCounters(dispatcher.address());
  EXPECT_EQ(before.queued, 1u);
  EXPECT_EQ(before.waiting, static_cast<uint64_t>(kChain - 1));
  EXPECT_EQ(before.queued_without_worker, 1u);
  auto worker = StartClosureWorker(dispatcher.address(), 4);
  EXPECT_EQ(FetchOrDie(chain.back()), std::to_string(kChain));
  EXPECT_EQ(FetchOrDie(chain[kChain / 2 - 1]), std::to_string(kChain / 2));
  EXPECT_TRUE(coordinator->Join().ok());
  ClosureCounters after = GetClosureCounters(dispatcher.address());
  EXPECT_EQ(after.waiting, 0u);
  EXPECT_EQ(after.results_accepted, static_cast<uint64_t>(kChain));
  EXPECT_GT(after.input_bytes_pushed, 0u);
}

TEST(ClosureDependencies, AFailedInputFailsItsDependantsNamingIt) {
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto input = coordinator->Schedule("fail", "boom");
  ASSERT_TRUE(input.ok());
  auto dependant = coordinator->Schedule("sum", "1", After({*input}));
  ASSERT_TRUE(dependant.ok());
  auto transitive = coordinator->Schedule("concat", "", After({*dependant}));
  ASSERT_TRUE(transitive.ok());
  auto independent = coordinator->Schedule("echo", "still here");
  ASSERT_TRUE(independent.ok());
  std::vector<RemoteValue> all = {*input, *dependant, *transitive, *independent};
  // Everything is scheduled before anything runs (no first error yet).
  ASSERT_TRUE(WaitUntil([&] { return AllAcknowledged(all); }));
  auto worker = StartClosureWorker(dispatcher.address());

  Result<std::string> failed = dependant->FetchFor(kFetchDeadline);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("input closure " + std::to_string(input->closure_id()) +
                                           " failed: boom"),
            std::string::npos)
      << failed.status().ToString();
  Result<std::string> failed_too = transitive->FetchFor(kFetchDeadline);
  ASSERT_FALSE(failed_too.ok());
  EXPECT_NE(failed_too.status().message().find(
                "input closure " + std::to_string(dependant->closure_id()) + " failed"),
            std::string::npos)
      << failed_too.status().ToString();
  // The first error is the input's own, raised once.
  Status joined = coordinator->Join();
  EXPECT_FALSE(joined.ok());
  EXPECT_NE(joined.message().find("closure " + std::to_string(input->closure_id()) + " failed"),
            std::string::npos)
      << joined.ToString();
  EXPECT_TRUE(coordinator->Join().ok()) << "a dependant's failure must not be a second error";
}

TEST(ClosureDependencies, ADispatcherKilledInTheMiddleOfAChainContinuesItAfterRestart) {
  constexpr int kChain = 300;
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<RemoteValue> chain = ScheduleChain(*coordinator, kChain);
  ASSERT_TRUE(WaitUntil([&] { return AllAcknowledged(chain); }));
  auto worker = StartClosureWorker(dispatcher.address());
  ASSERT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.results_accepted >= 30;
  })) << "the chain never got going";
  dispatcher.Kill9();
  dispatcher.Start();
  ClosureCounters restarted = GetClosureCounters(dispatcher.address());
  EXPECT_GT(restarted.waiting, 0u) << "the kill came too late to be mid-chain";
  EXPECT_EQ(FetchOrDie(chain.back()), std::to_string(kChain));
  EXPECT_TRUE(coordinator->Join().ok());
}

TEST(ClosureDependencies, AnInputFetchedWhileItsDependantWaitsIsKeptUntilItRan) {
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto fast = coordinator->Schedule("echo", "A");
  auto slow = coordinator->Schedule("sleep", "600");
  ASSERT_TRUE(fast.ok() && slow.ok());
  auto both = coordinator->Schedule("concat", "!", After({*fast, *slow}));
  ASSERT_TRUE(both.ok());
  auto worker = StartClosureWorker(dispatcher.address(), 2);
  // Fetching releases `fast` at the dispatcher while `both` still waits for `slow`.
  EXPECT_EQ(FetchOrDie(*fast), "A");
  ASSERT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.waiting == 1 && c.finished == 1;
  })) << "the dependant should be waiting for the sleep, with the fetched input still held";
  EXPECT_EQ(FetchOrDie(*both), "A" + worker->address() + "!");
  // Once the dependant is done, the held release of the input goes through
  // (the dependant's own release is the client's, sent with a later call).
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.released_total >= 1;
  })) << "the held release of the input was never journaled";
  // An input fetched before its dependant is scheduled is refused at once.
  auto late = coordinator->Schedule("sum", "", After({*fast}));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition) << late.status().ToString();
}

TEST(ClosureDependencies, InputsOverOnePushFailTheirDependantNamingTheLimit) {
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto a = coordinator->Schedule("bytes", "9000000:1");
  auto b = coordinator->Schedule("bytes", "9000000:2");
  ASSERT_TRUE(a.ok() && b.ok());
  auto too_big = coordinator->Schedule("concat", "", After({*a, *b}));
  auto fits = coordinator->Schedule("concat", "", After({*a}));
  ASSERT_TRUE(too_big.ok() && fits.ok());
  auto worker = StartClosureWorker(dispatcher.address());
  EXPECT_EQ(FetchOrDie(*fits).size(), 9000000u);
  Result<std::string> refused = too_big->FetchFor(kFetchDeadline);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("ResourceExhausted"), std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("16777216 bytes per push"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(GetClosureCounters(dispatcher.address()).inputs_over_limit, 1u);
}

}  // namespace
}  // namespace dispatch::testing
