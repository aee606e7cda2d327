// ClosureTimings: queue wait from schedule or put-back to assignment,
// execution from assignment to the worker's outcome, and its bound.
#include <gtest/gtest.h>

#include <capnp/message.h>

#include <vector>

#include "reactor/closure_timings.h"

namespace dispatch::reactor {
namespace {

constexpr uint64_t kMs = 1000000;

class Updates {
 public:
  journal::Update::Reader Scheduled(std::vector<uint64_t> ids) {
    auto list = Batch().initScheduled(static_cast<unsigned>(ids.size()));
    for (size_t i = 0; i < ids.size(); ++i) list[i].setClosureId(ids[i]);
    return Reader();
  }
  journal::Update::Reader Assigned(std::vector<uint64_t> ids) {
    auto list = Batch().initAssigned(static_cast<unsigned>(ids.size()));
    for (size_t i = 0; i < ids.size(); ++i) list[i].setClosureId(ids[i]);
    return Reader();
  }
  journal::Update::Reader Finished(std::vector<uint64_t> ids) {
    auto list = Batch().initFinished(static_cast<unsigned>(ids.size()));
    for (size_t i = 0; i < ids.size(); ++i) list[i].setClosureId(ids[i]);
    return Reader();
  }
  journal::Update::Reader PutBack(uint64_t id) {
    message_ = std::make_unique<capnp::MallocMessageBuilder>();
    message_->initRoot<journal::Update>().initClosurePutBack().setClosureId(id);
    return Reader();
  }

 private:
  journal::ClosureBatch::Builder Batch() {
    message_ = std::make_unique<capnp::MallocMessageBuilder>();
    return message_->initRoot<journal::Update>().initClosureBatch();
  }
  journal::Update::Reader Reader() { return message_->getRoot<journal::Update>().asReader(); }
  std::unique_ptr<capnp::MallocMessageBuilder> message_;
};

TEST(ClosureTimings, TimesTheQueueFromScheduleOrPutBackAndTheRunFromAssignment) {
  ClosureTimings timings;
  Updates u;
  timings.Observe(u.Scheduled({1, 2}), 0);
  timings.Observe(u.Assigned({1}), 3 * kMs);
  timings.Observe(u.Finished({1}), 10 * kMs);
  EXPECT_EQ(timings.queue_wait().count(), 1u);
  EXPECT_NEAR(timings.queue_wait().sum(), 0.003, 1e-9);
  EXPECT_EQ(timings.execution().count(), 1u);
  EXPECT_NEAR(timings.execution().sum(), 0.007, 1e-9);
  // Closure 2 runs, its worker dies, it queues again and runs elsewhere.
  timings.Observe(u.Assigned({2}), 20 * kMs);
  timings.Observe(u.PutBack(2), 25 * kMs);
  timings.Observe(u.Assigned({2}), 26 * kMs);
  EXPECT_EQ(timings.queue_wait().count(), 3u);
  EXPECT_NEAR(timings.queue_wait().sum(), 0.003 + 0.020 + 0.001, 1e-9);
  EXPECT_EQ(timings.execution().count(), 1u);  // the lost run is no execution
  EXPECT_EQ(timings.tracked(), 1u);            // closure 2, running
}

TEST(ClosureTimings, ClosuresPastTheBoundAreNotTimedAndAreCounted) {
  ClosureTimings timings(/*max_tracked=*/2);
  Updates u;
  timings.Observe(u.Scheduled({1, 2, 3}), 0);
  EXPECT_EQ(timings.untracked(), 1u);
  EXPECT_EQ(timings.tracked(), 2u);
  timings.Observe(u.Assigned({1, 2, 3}), kMs);
  EXPECT_EQ(timings.queue_wait().count(), 2u);
  EXPECT_EQ(timings.untracked(), 2u);  // 3 was not timed in the queue nor as a run
  timings.Observe(u.Finished({1, 2, 3}), 2 * kMs);
  EXPECT_EQ(timings.execution().count(), 2u);
  EXPECT_EQ(timings.tracked(), 0u);
}

}  // namespace
}  // namespace dispatch::reactor
