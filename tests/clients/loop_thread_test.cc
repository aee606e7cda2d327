// LoopThread's start/stop races, tested once here for every client built on
// it (Coordinator, WorkerAgent, DatasetReader): Stop before Start, twice, from
// many threads and racing posts; posts after Stop; a failing setup; errors and
// Stop racing RunAndWait(); destruction without Stop. Every wait has a
// deadline; a hang fails the test instead of the suite's timeout.
#include "clients/loop_thread.h"

#include <gtest/gtest.h>
#include <kj/debug.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "common/rpc_status.h"
#include "reactor/uvkj/uv_handle.h"
#include "tests/support/wait_until.h"

namespace dispatch::clients::testing {
namespace {

using uvkj::CheckUv;
using uvkj::UvHandle;

constexpr auto kDeadline = std::chrono::seconds(20);

template <typename T>
bool Ready(std::future<T>& future) {
  return future.wait_for(kDeadline) == std::future_status::ready;
}

// What the tests learn about a Body: where it was built and destroyed, and
// whether the loop was still usable when it went.
struct BodyLog {
  std::atomic<int> built{0};
  std::atomic<int> destroyed{0};
  std::thread::id built_on;
  std::thread::id destroyed_on;
  std::atomic<int> ran{0};  // posted functions that ran, for the tests that count them
  std::atomic<int> ran_before_destroyed{-1};
};

// Owns an active, referenced libuv handle (an hour-long timer): destroyed
// after the loop closed, it would make uv_loop_close() fail.
class ProbeBody final : public LoopThread::Body {
 public:
  ProbeBody(UvAsyncIo& io, BodyLog& log)
      : io_(io), log_(log), timer_(io.loop(), nullptr, uv_timer_init) {
    CheckUv(uv_timer_start(
                timer_.get(), [](uv_timer_t*) {}, 3600 * 1000, 0),
            "uv_timer_start");
    log_.built_on = std::this_thread::get_id();
    ++log_.built;
  }
  ~ProbeBody() noexcept(false) override {
    log_.destroyed_on = std::this_thread::get_id();
    log_.ran_before_destroyed = log_.ran.load();
    ++log_.destroyed;
  }
  UvAsyncIo& io() { return io_; }

 private:
  UvAsyncIo& io_;
  BodyLog& log_;
  UvHandle<uv_timer_t> timer_;
};

LoopThread::Setup MakeSetup(BodyLog& log, ProbeBody** out = nullptr) {
  return [&log, out](UvAsyncIo& io) -> kj::Own<LoopThread::Body> {
    auto body = kj::heap<ProbeBody>(io, log);
    if (out != nullptr) *out = body.get();
    return body;
  };
}

void ExpectCleanEnd(const LoopThread& thread, const BodyLog& log) {
  EXPECT_EQ(log.built.load(), 1);
  EXPECT_EQ(log.destroyed.load(), 1);
  EXPECT_EQ(log.destroyed_on, log.built_on);
  EXPECT_NE(log.destroyed_on, std::this_thread::get_id());
  ASSERT_TRUE(thread.loop_close_result().has_value());
  EXPECT_EQ(*thread.loop_close_result(), 0);
}

TEST(LoopThread, PostRunsFunctionsOnTheLoopThreadInOrder) {
  LoopThread thread("test loop");
  BodyLog log;
  ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
  EXPECT_FALSE(thread.OnLoopThread());
  std::vector<int> order;  // loop thread only
  std::promise<bool> on_loop;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(thread.Post([&order, i] { order.push_back(i); }));
  }
  ASSERT_TRUE(thread.Post([&] { on_loop.set_value(thread.OnLoopThread()); }));
  auto on = on_loop.get_future();
  ASSERT_TRUE(Ready(on));
  EXPECT_TRUE(on.get());
  thread.Stop();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  ExpectCleanEnd(thread, log);
}

TEST(LoopThread, StopBeforeStartIsANoOpAndStartStillWorks) {
  LoopThread thread("test loop");
  EXPECT_FALSE(thread.Post([] {}));
  thread.Stop();
  EXPECT_FALSE(thread.WasStarted());
  EXPECT_FALSE(thread.loop_close_result().has_value());
  BodyLog log;
  ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
  EXPECT_TRUE(thread.WasStarted());
  std::promise<void> ran;
  ASSERT_TRUE(thread.Post([&] { ran.set_value(); }));
  auto future = ran.get_future();
  EXPECT_TRUE(Ready(future));
  thread.Stop();
  ExpectCleanEnd(thread, log);
}

TEST(LoopThread, StopTwiceAndFromManyThreadsAtOnceEndsTheThreadOnce) {
  LoopThread thread("test loop");
  BodyLog log;
  ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
  std::vector<std::future<void>> stops;
  for (int i = 0; i < 8; ++i) {
    stops.push_back(std::async(std::launch::async, [&] {
      thread.Stop();
      // Every Stop() returns only once the thread is gone.
      EXPECT_EQ(log.destroyed.load(), 1);
      EXPECT_TRUE(thread.loop_close_result().has_value());
    }));
  }
  for (auto& stop : stops) ASSERT_TRUE(Ready(stop));
  thread.Stop();
  thread.Stop();
  ExpectCleanEnd(thread, log);
  EXPECT_EQ(thread.Start(MakeSetup(log)).code(), StatusCode::kFailedPrecondition);
}

TEST(LoopThread, PostAfterStopReturnsFalseAndDropsTheFunction) {
  LoopThread thread("test loop");
  auto token = std::make_shared<int>(0);
  EXPECT_FALSE(thread.Post([token] {}));  // before Start
  EXPECT_EQ(token.use_count(), 1);
  BodyLog log;
  ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
  thread.Stop();
  bool ran = false;
  EXPECT_FALSE(thread.Post([token, &ran] { ran = true; }));
  EXPECT_EQ(token.use_count(), 1);  // dropped, not kept
  EXPECT_FALSE(ran);
  ExpectCleanEnd(thread, log);
}

TEST(LoopThread, StopRacingPostsFromManyThreadsRunsEveryAcceptedPostBeforeTheBodyGoes) {
  LoopThread thread("test loop");
  BodyLog log;
  ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
  std::atomic<int> accepted{0};
  std::atomic<bool> runaway{false};
  std::vector<std::thread> posters;
  for (int i = 0; i < 8; ++i) {
    posters.emplace_back([&] {
      auto deadline = std::chrono::steady_clock::now() + kDeadline;
      while (thread.Post([&log] { ++log.ran; })) {
        ++accepted;
        if (std::chrono::steady_clock::now() > deadline) {
          runaway = true;  // Post() kept accepting after Stop()
          return;
        }
      }
    });
  }
  ASSERT_TRUE(dispatch::testing::WaitUntil([&] { return log.ran.load() >= 1000; }));
  thread.Stop();
  for (auto& poster : posters) poster.join();
  EXPECT_FALSE(runaway.load());
  EXPECT_EQ(log.ran.load(), accepted.load());
  EXPECT_EQ(log.ran_before_destroyed.load(), accepted.load());
  ExpectCleanEnd(thread, log);
}

TEST(LoopThread, PostRefusesAsSoonAsStopIsCalledWhileEarlierPostsStillRun) {
  LoopThread thread("test loop");
  BodyLog log;
  ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
  // The loop is busy in a posted function while Stop() is called.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> busy{false};
  ASSERT_TRUE(thread.Post([&] {
    busy = true;
    released.wait();
    ++log.ran;
  }));
  ASSERT_TRUE(dispatch::testing::WaitUntil([&] { return busy.load(); }));
  std::atomic<bool> stopping{false};
  auto stopper = std::async(std::launch::async, [&] {
    stopping = true;
    thread.Stop();
  });
  EXPECT_TRUE(dispatch::testing::WaitUntil([&] { return stopping.load(); }));
  // Refused from the call of Stop() on, although the loop has not looked at
  // its mailbox since. (Bounded, so that a Post() that never refuses fails
  // the test instead of filling the memory.)
  int accepted = 1;
  bool refused = false;
  while (!refused && accepted < 1000000) {
    refused = !thread.Post([&log] { ++log.ran; });
    if (!refused) ++accepted;
    std::this_thread::yield();
  }
  EXPECT_TRUE(refused) << accepted << " posts accepted after Stop() was called";
  EXPECT_FALSE(thread.Post([] {}));
  release.set_value();
  ASSERT_TRUE(Ready(stopper));
  EXPECT_EQ(log.ran.load(), accepted);  // every accepted function ran, before the Body went
  EXPECT_EQ(log.ran_before_destroyed.load(), accepted);
  ExpectCleanEnd(thread, log);
}

TEST(LoopThread, StopRacingStartFromAnotherThreadNeverHangsOrLeaks) {
  for (int i = 0; i < 50; ++i) {
    LoopThread thread("test loop");
    BodyLog log;
    std::promise<void> go;
    std::shared_future<void> go_shared = go.get_future().share();
    auto stopper = std::async(std::launch::async, [&] {
      go_shared.wait();
      thread.Stop();
    });
    go.set_value();
    ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
    ASSERT_TRUE(Ready(stopper));
    thread.Stop();  // the racing Stop() may have come before Start()
    ExpectCleanEnd(thread, log);
  }
}

TEST(LoopThread, StartWhoseSetupFailsReturnsItsErrorAndLeavesNothingRunning) {
  LoopThread thread("test loop");
  std::thread::id setup_thread;
  Status started = thread.Start([&](UvAsyncIo& io) -> kj::Own<LoopThread::Body> {
    setup_thread = std::this_thread::get_id();
    // A handle made before the failure must still be closed with the loop.
    UvHandle<uv_timer_t> made(io.loop(), nullptr, uv_timer_init);
    ThrowStatus(InvalidArgumentError("no such option"));
  });
  EXPECT_EQ(started.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(started.message(), "test loop: no such option");
  EXPECT_NE(setup_thread, std::this_thread::get_id());
  ASSERT_TRUE(thread.loop_close_result().has_value());  // the thread is gone already
  EXPECT_EQ(*thread.loop_close_result(), 0);
  EXPECT_FALSE(thread.Post([] {}));
  EXPECT_EQ(thread.RunAndWait([] { return kj::Promise<void>(kj::READY_NOW); }).code(),
            StatusCode::kUnavailable);
  thread.Stop();
  thread.Stop();
  BodyLog unused;
  EXPECT_EQ(thread.Start(MakeSetup(unused)).code(), StatusCode::kFailedPrecondition);

  LoopThread plain("test loop");
  Status failed =
      plain.Start([](UvAsyncIo&) -> kj::Own<LoopThread::Body> { KJ_FAIL_REQUIRE("setup broke"); });
  EXPECT_EQ(failed.code(), StatusCode::kInternal);
  EXPECT_NE(failed.message().find("setup broke"), std::string::npos) << failed.ToString();
}

TEST(LoopThread, RunAndWaitReturnsWhatThePromiseGaveOnTheLoop) {
  LoopThread thread("test loop");
  BodyLog log;
  ProbeBody* body = nullptr;
  ASSERT_TRUE(thread.Start(MakeSetup(log, &body)).ok());
  Result<int> value = thread.RunAndWait<int>([&] {
    return body->io().timer().afterDelay(1 * kj::MILLISECONDS).then([&] {
      return thread.OnLoopThread() ? 42 : -1;
    });
  });
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(*value, 42);
  EXPECT_TRUE(thread.RunAndWait([] { return kj::Promise<void>(kj::READY_NOW); }).ok());
  // Move-only values travel too.
  Result<kj::String> text = thread.RunAndWait<kj::String>([] { return kj::str("moved"); });
  ASSERT_TRUE(text.ok());
  EXPECT_STREQ(text->cStr(), "moved");
  thread.Stop();
  ExpectCleanEnd(thread, log);
}

TEST(LoopThread, RunAndWaitPassesOnWhatThePromiseOrTheStartThrew) {
  LoopThread thread("test loop");
  BodyLog log;
  ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
  // Thrown by the promise, later on the loop.
  Status later = thread.RunAndWait([] {
    return kj::evalLater([]() -> kj::Promise<void> { ThrowStatus(NotFoundError("job 17")); });
  });
  EXPECT_EQ(later, NotFoundError("job 17"));
  // Thrown by the function that makes the promise.
  Result<int> now = thread.RunAndWait<int>(
      []() -> kj::Promise<int> { ThrowStatus(FailedPreconditionError("not yet")); });
  EXPECT_EQ(now.status(), FailedPreconditionError("not yet"));
  // An error without a Status code.
  Status plain = thread.RunAndWait([]() -> kj::Promise<void> {
    return kj::evalLater([]() { KJ_FAIL_ASSERT("broken invariant"); });
  });
  EXPECT_EQ(plain.code(), StatusCode::kInternal);
  EXPECT_NE(plain.message().find("broken invariant"), std::string::npos) << plain.ToString();
  // The loop goes on.
  EXPECT_TRUE(thread.RunAndWait([] { return kj::Promise<void>(kj::READY_NOW); }).ok());
  thread.Stop();
  ExpectCleanEnd(thread, log);
}

TEST(LoopThread, RunAndWaitRacingStopReturnsUnavailableInsteadOfHanging) {
  LoopThread thread("test loop");
  BodyLog log;
  ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
  // One caller waits on a promise that never resolves...
  std::atomic<bool> waiting{false};
  auto stuck = std::async(std::launch::async, [&] {
    return thread.RunAndWait([&]() -> kj::Promise<void> {
      waiting = true;
      return kj::NEVER_DONE;
    });
  });
  // ...and others keep calling, before, during and after Stop().
  std::atomic<int> answered{0};
  std::vector<std::future<Status>> callers;
  for (int i = 0; i < 4; ++i) {
    callers.push_back(std::async(std::launch::async, [&] {
      while (true) {
        Status s = thread.RunAndWait([] { return kj::Promise<void>(kj::READY_NOW); });
        if (!s.ok()) return s;
        ++answered;
      }
    }));
  }
  ASSERT_TRUE(
      dispatch::testing::WaitUntil([&] { return waiting.load() && answered.load() >= 100; }));
  thread.Stop();
  ASSERT_TRUE(Ready(stuck));
  EXPECT_EQ(stuck.get(), UnavailableError("the test loop is closed"));
  for (auto& caller : callers) {
    ASSERT_TRUE(Ready(caller));
    EXPECT_EQ(caller.get().code(), StatusCode::kUnavailable);
  }
  EXPECT_EQ(thread.RunAndWait([] { return kj::Promise<void>(kj::READY_NOW); }).code(),
            StatusCode::kUnavailable);
  ExpectCleanEnd(thread, log);
}

TEST(LoopThread, StopAndRunAndWaitOnTheLoopThreadFailLoudly) {
  LoopThread thread("test loop");
  BodyLog log;
  ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
  std::promise<std::pair<bool, bool>> threw;
  ASSERT_TRUE(thread.Post([&] {
    bool stop_threw = false;
    bool wait_threw = false;
    try {
      thread.Stop();
    } catch (const kj::Exception&) {
      stop_threw = true;
    }
    try {
      (void)thread.RunAndWait([] { return kj::Promise<void>(kj::READY_NOW); });
    } catch (const kj::Exception&) {
      wait_threw = true;
    }
    threw.set_value({stop_threw, wait_threw});
  }));
  auto future = threw.get_future();
  ASSERT_TRUE(Ready(future));
  auto [stop_threw, wait_threw] = future.get();
  EXPECT_TRUE(stop_threw);
  EXPECT_TRUE(wait_threw);
  // Still running: the refused Stop() stopped nothing.
  EXPECT_TRUE(thread.RunAndWait([] { return kj::Promise<void>(kj::READY_NOW); }).ok());
  thread.Stop();
  ExpectCleanEnd(thread, log);
}

TEST(LoopThread, DestructionWithoutStopEndsTheThreadAndDestroysTheBodyOnIt) {
  BodyLog log;
  std::atomic<bool> started{false};
  std::future<Status> waiting;
  {
    LoopThread thread("test loop");
    ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
    ASSERT_TRUE(thread.Post([&] { ++log.ran; }));
    waiting = std::async(std::launch::async, [&] {
      return thread.RunAndWait([&]() -> kj::Promise<void> {
        started = true;
        return kj::NEVER_DONE;
      });
    });
    ASSERT_TRUE(dispatch::testing::WaitUntil([&] { return started.load(); }));
  }
  ASSERT_TRUE(Ready(waiting));
  EXPECT_EQ(waiting.get().code(), StatusCode::kUnavailable);
  EXPECT_EQ(log.destroyed.load(), 1);
  EXPECT_EQ(log.destroyed_on, log.built_on);
  EXPECT_NE(log.destroyed_on, std::this_thread::get_id());
  EXPECT_EQ(log.ran_before_destroyed.load(), 1);
}

TEST(LoopThread, APostedFunctionThatThrowsIsLoggedAndTheLoopGoesOn) {
  LoopThread thread("test loop");
  BodyLog log;
  ASSERT_TRUE(thread.Start(MakeSetup(log)).ok());
  ASSERT_TRUE(thread.Post([] { KJ_FAIL_REQUIRE("a posted function broke"); }));
  ASSERT_TRUE(thread.Post([] { throw std::runtime_error("so did this one"); }));
  EXPECT_TRUE(thread.RunAndWait([] { return kj::Promise<void>(kj::READY_NOW); }).ok());
  thread.Stop();
  ExpectCleanEnd(thread, log);
}

}  // namespace
}  // namespace dispatch::clients::testing
