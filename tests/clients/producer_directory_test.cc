// ChangeSignal and ProducerDirectory::WhenChanged: how a worker's getElements
// calls wait, for elements and for a task it does not run yet. Calls must be
// answered in the order they came (a reader takes its calls' replies in the
// order it sent them), so the waits are woken in the order they began.
#include "clients/task_producer.h"

#include <gtest/gtest.h>

#include <kj/async.h>

#include <vector>

#include "clients/dataset_kind.h"

namespace dispatch::clients {
namespace {

TEST(ChangeSignal, WakesEveryWaiterInTheOrderTheyBeganWaiting) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  ChangeSignal signal;
  std::vector<int> woken;
  kj::Vector<kj::Promise<void>> waits;
  for (int i = 0; i < 5; ++i) {
    waits.add(signal.Wait().then([&woken, i]() { woken.push_back(i); }).eagerlyEvaluate(nullptr));
  }
  loop.run();
  EXPECT_TRUE(woken.empty()) << "nothing happened yet";
  signal.Notify();
  loop.run();
  EXPECT_EQ(woken, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(signal.held(), 0u);
}

TEST(ChangeSignal, DropsTheWaitsGivenUpAndKeepsTheRest) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  ChangeSignal signal;
  // A long-lived signal (a directory between tasks) sees many waits given up
  // (calls that timed out) and no Notify: they must not pile up.
  int kept_woken = 0;
  kj::Vector<kj::Promise<void>> kept;
  for (int i = 0; i < 1000; ++i) {
    kj::Promise<void> wait = signal.Wait();
    if (i % 100 == 0) {
      kept.add(wait.then([&kept_woken]() { ++kept_woken; }).eagerlyEvaluate(nullptr));
    }  // else dropped here: given up
  }
  EXPECT_LE(signal.held(), ChangeSignal::kMinPruneAt) << "given-up waits piled up";
  signal.Notify();
  loop.run();
  EXPECT_EQ(kept_woken, 10) << "a wait still waiting was dropped";
}

TEST(ProducerDirectory, WakesItsWaitersWhenATaskStartsOrFinishesHere) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  ProducerDirectory directory;
  DatasetKindRegistry kinds;
  TaskDescription task;
  task.task_id = 7;

  kj::Promise<void> started = directory.WhenChanged();
  EXPECT_FALSE(started.poll(ws));
  {
    TaskProducer producer(task, kinds, directory, ProducerLimits());
    EXPECT_TRUE(started.poll(ws)) << "a call for task 7 would go on waiting for it";
    EXPECT_EQ(directory.Find(7), &producer);
  }
  kj::Promise<void> finished = directory.WhenChanged();
  EXPECT_FALSE(finished.poll(ws));
  directory.MarkFinished(7);
  EXPECT_TRUE(finished.poll(ws)) << "a call for finished task 7 would not hear its end";
}

}  // namespace
}  // namespace dispatch::clients
