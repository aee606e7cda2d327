// PoolWork: a job runs on a pool thread and comes back to the loop thread;
// an owner that goes with its job in flight gives it up without waiting: a
// running job is told to stop, one not started never runs, neither calls its
// owner back, and each is freed by the time the loop's owner closes the loop
// (UvLoop::Close() == 0).
#include "reactor/uvkj/pool_work.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::uvkj::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Polls `condition` (set by another thread) until it holds or 30 s pass.
template <typename F>
bool WaitFor(F condition) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// What a job reports; outlives the job so the test can read it afterwards.
struct Report {
  std::atomic<bool> started{false};
  std::atomic<bool> saw_cancel{false};
  std::atomic<bool> freed{false};
  std::thread::id ran_on;
};

// Runs until released or cancelled (or a 30 s safety deadline).
class BlockingJob final : public PoolJob {
 public:
  BlockingJob(Report& report, const std::atomic<bool>& release) : report_(report), release_(release) {}
  ~BlockingJob() override { report_.freed = true; }
  void Run() override {
    report_.ran_on = std::this_thread::get_id();
    report_.started = true;
    WaitFor([&]() { return release_.load() || cancelled(); });
    report_.saw_cancel = cancelled();
  }

 private:
  Report& report_;
  const std::atomic<bool>& release_;
};

// libuv's pool size: UV_THREADPOOL_SIZE or its default of 4.
int PoolSize() {
  const char* size = getenv("UV_THREADPOOL_SIZE");
  return size != nullptr && atoi(size) > 0 ? atoi(size) : 4;
}

TEST(PoolWork, RunsTheJobOnAPoolThreadAndHandsItBackOnTheLoopThread) {
  UvLoop loop;
  Report report;
  std::atomic<bool> release{true};
  int done_calls = 0;
  std::thread::id done_on;
  {
    PoolWork<BlockingJob> work(loop.get());
    auto job = std::make_unique<BlockingJob>(report, release);
    ASSERT_EQ(work.Start(job, [&](std::unique_ptr<BlockingJob> back) {
      ++done_calls;
      done_on = std::this_thread::get_id();
      EXPECT_NE(back, nullptr);
    }), 0);
    EXPECT_EQ(job, nullptr);  // taken
    EXPECT_TRUE(work.in_flight());
    while (work.in_flight()) uv_run(loop.get(), UV_RUN_ONCE);  // the request keeps the loop alive
  }
  EXPECT_EQ(done_calls, 1);
  EXPECT_EQ(done_on, std::this_thread::get_id());
  EXPECT_NE(report.ran_on, std::this_thread::get_id());
  EXPECT_TRUE(report.freed);  // the job was handed back and dropped by `done`
  EXPECT_EQ(loop.Close(), 0);
}

TEST(PoolWork, DestroyingTheOwnerCancelsARunningJobWithoutWaitingAndFreesIt) {
  UvLoop loop;
  Report report;
  std::atomic<bool> release{false};  // only cancellation ends it
  bool done_called = false;
  {
    PoolWork<BlockingJob> work(loop.get());
    auto job = std::make_unique<BlockingJob>(report, release);
    ASSERT_EQ(work.Start(job, [&](std::unique_ptr<BlockingJob>) { done_called = true; }), 0);
    ASSERT_TRUE(WaitFor([&]() { return report.started.load(); }));
  }  // gives the running job up: returns at once, the job is still on its thread
  // The loop's owner lets the request come back, and nothing is left open.
  EXPECT_EQ(loop.Close(), 0);
  EXPECT_TRUE(report.saw_cancel) << "the job ran until its deadline: it was never told to stop";
  EXPECT_TRUE(report.freed);
  EXPECT_FALSE(done_called) << "an owner that went was called back";
}

TEST(PoolWork, AJobGivenUpBeforeItStartsNeverRunsAndIsFreed) {
  UvLoop loop;
  // Occupy every pool thread, so the next job waits in libuv's queue.
  std::atomic<bool> release{false};
  const int threads = PoolSize();
  std::vector<std::unique_ptr<Report>> reports;
  std::vector<std::unique_ptr<PoolWork<BlockingJob>>> blockers;
  for (int i = 0; i < threads; ++i) {
    reports.push_back(std::make_unique<Report>());
    blockers.push_back(std::make_unique<PoolWork<BlockingJob>>(loop.get()));
    auto job = std::make_unique<BlockingJob>(*reports.back(), release);
    ASSERT_EQ(blockers.back()->Start(job, [](std::unique_ptr<BlockingJob>) {}), 0);
  }
  ASSERT_TRUE(WaitFor([&]() {
    for (auto& r : reports) {
      if (!r->started) return false;
    }
    return true;
  }));
  Report queued;
  bool done_called = false;
  {
    PoolWork<BlockingJob> work(loop.get());
    auto job = std::make_unique<BlockingJob>(queued, release);
    ASSERT_EQ(work.Start(job, [&](std::unique_ptr<BlockingJob>) { done_called = true; }), 0);
  }  // given up while still queued
  release = true;
  for (auto& blocker : blockers) {
    while (blocker->in_flight()) uv_run(loop.get(), UV_RUN_ONCE);
  }
  EXPECT_EQ(loop.Close(), 0);
  EXPECT_FALSE(queued.started) << "a job given up before it started still ran";
  EXPECT_TRUE(queued.freed);
  EXPECT_FALSE(done_called);
}

}  // namespace
}  // namespace dispatch::uvkj::testing
