// UvEventPort: the guard against Promise::wait() inside libuv callbacks, an
// idle loop that sleeps, KJ work that cannot starve libuv, and wake-ups from
// other threads through kj::Executor.
#include <gtest/gtest.h>
#include <kj/debug.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "reactor/uvkj/repeating_timer.h"
#include "tests/uvkj/test_util.h"

namespace dispatch::uvkj::testing {
namespace {

// Calls `body` once from a libuv timer callback, while the loop runs.
class FromUvCallback {
 public:
  FromUvCallback(uv_loop_t* loop, std::function<void()> body)
      : timer_(loop, 1,
               [this]() {
                 timer_.Stop();
                 body_();
               }),
        body_(std::move(body)) {
    timer_.Start();
  }

 private:
  UvRepeatingTimer timer_;
  std::function<void()> body_;
};

// Gives up after `seconds` (a deadline for tests whose failure mode is a
// loop that never yields, so no libuv timer could end them).
class Watchdog {
 public:
  explicit Watchdog(int seconds)
      : thread_([this, seconds]() {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
            expired_ = true;
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  bool expired() const { return expired_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::atomic<bool> expired_{false};
  std::thread thread_;
};

// A KJ task that re-schedules itself until `stop` holds.
kj::Promise<void> Spin(const std::function<bool()>& stop, uint64_t& turns) {
  ++turns;
  if (stop()) return kj::READY_NOW;
  return kj::evalLater([&stop, &turns]() { return Spin(stop, turns); });
}

TEST(UvEventPort, WaitScopeAccessorThrowsInsideALibuvCallback) {
  Bridge bridge;
  auto& io = bridge.io();
  kj::Maybe<kj::Exception> caught;
  bool ran = false;
  {
    FromUvCallback call(io.loop(), [&]() {
      ran = true;
      // A promise that is already resolved: the port's wait() is never
      // reached, so only the accessor can refuse. (Without it this "works" by
      // running KJ nested in the callback, which hides the bug.)
      caught = kj::runCatchingExceptions(
          [&]() { kj::Promise<void>(kj::READY_NOW).wait(io.wait_scope()); });
    });
    io.Run(UV_RUN_DEFAULT);
  }
  ASSERT_TRUE(ran);
  KJ_IF_MAYBE (e, caught) {
    EXPECT_TRUE(strstr(e->getDescription().cStr(), "libuv callback") != nullptr)
        << kj::str(*e).cStr();
  } else {
    FAIL() << "wait_scope() inside a libuv callback did not throw";
  }
  // Outside the loop the same calls are fine.
  kj::Promise<void>(kj::READY_NOW).wait(io.wait_scope());
  io.timer().afterDelay(kj::MILLISECONDS).wait(io.wait_scope());
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvEventPort, PortWaitThrowsInsideALibuvCallbackInsteadOfReenteringUvRun) {
  Bridge bridge;
  auto& io = bridge.io();
  kj::WaitScope& wait_scope = io.wait_scope();  // stashed outside the loop
  {
    auto pair = MakeUnixPair(io);
    kj::Maybe<kj::Exception> caught;
    bool ran = false;
    // Makes the read complete 20 ms later, so that without the guard a
    // nested uv_run would return and the test fail instead of hanging.
    int writer_fd = KJ_ASSERT_NONNULL(pair.a->getFd());
    UvRepeatingTimer rescue(io.loop(), 20, [&]() {
      rescue.Stop();
      KJ_SYSCALL(::write(writer_fd, "x", 1));
    });
    {
      FromUvCallback call(io.loop(), [&]() {
        ran = true;
        rescue.Start();
        caught = kj::runCatchingExceptions([&]() {
          kj::byte byte;
          pair.b->tryRead(&byte, 1, 1).wait(wait_scope);  // needs I/O: would nest uv_run
        });
      });
      // Not Run(UV_RUN_DEFAULT): the abandoned read leaves the socket watched
      // until it next becomes readable, which keeps the loop alive.
      ASSERT_TRUE(WaitUntil([&] { return ran; }, LoopPasses(io)));
    }
    ASSERT_TRUE(ran);
    KJ_IF_MAYBE (e, caught) {
      EXPECT_TRUE(strstr(e->getDescription().cStr(), "inside a libuv callback") != nullptr)
          << kj::str(*e).cStr();
    } else {
      FAIL() << "Promise::wait() inside a libuv callback did not throw";
    }

    // The loop is intact: the same stream still reads through Run().
    kj::byte buffer[4];
    Outcome<size_t> read;
    auto reading = Track(pair.b->tryRead(buffer, 4, 4), read);
    Outcome<void> wrote;
    auto writing = Track(pair.a->write("okay", 4), wrote);
    ASSERT_TRUE(WaitUntil([&] { return read.done && wrote.done; }, LoopPasses(io)));
    EXPECT_EQ(KJ_ASSERT_NONNULL(read.value), 4u);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvEventPort, RunFromInsideALibuvCallbackThrows) {
  Bridge bridge;
  auto& io = bridge.io();
  kj::Maybe<kj::Exception> caught;
  {
    FromUvCallback call(
        io.loop(), [&]() { caught = kj::runCatchingExceptions([&]() { io.Run(UV_RUN_NOWAIT); }); });
    io.Run(UV_RUN_DEFAULT);
  }
  EXPECT_TRUE(caught != nullptr);
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvEventPort, TopLevelWaitDrivesTheLoopForIo) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    auto pair = MakeUnixPair(io);
    kj::byte buffer[5];
    auto read = pair.b->tryRead(buffer, 5, 5);
    auto write = pair.a->write("hello", 5);
    EXPECT_EQ(read.wait(io.wait_scope()), 5u);
    write.wait(io.wait_scope());
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

// A top-level wait() on a timer that is already due once the wait has run
// the work queued before it. KJ tells the port "runnable" only when its own
// notion changes, and the turns of a wait() empty the queue without updating
// that notion: the timer firing in libuv's timers phase queued a KJ event
// without a word to the port, and uv_run(UV_RUN_ONCE) went on to block in the
// poll phase until some other event came (in the test suite, a push seconds
// later: tests failed on loaded machines). Here a watchdog's wake() would be
// that other event.
TEST(UvEventPort, TopLevelWaitOnADueTimerReturnsWithoutWaitingForAnotherEvent) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    // Keeps the loop alive with nothing to say, as an idle connection does.
    UvRepeatingTimer far(io.loop(), 60 * 1000, [] {});
    far.Start();
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
    std::atomic<bool> rescued{false};
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return finished; })) {
        rescued = true;
        io.port().wake();
      }
    });
    for (int i = 0; i < 20 && !rescued; ++i) {
      auto due = io.timer().afterDelay(1 * kj::MILLISECONDS);
      // Queued work the wait runs first: KJ tells the port "runnable" when it
      // is queued, and nothing when the wait's own turns empty the queue.
      auto queued = kj::evalLater([] {}).eagerlyEvaluate(nullptr);
      // The delay passes before the wait starts (a busy or preempted thread).
      const uint64_t until = uv_hrtime() + 3 * 1000 * 1000;
      while (uv_hrtime() < until) {
      }
      due.wait(io.wait_scope());
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      finished = true;
    }
    cv.notify_one();
    watchdog.join();
    EXPECT_FALSE(rescued) << "a wait returned only when another event woke the loop";
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvEventPort, IdleLoopWithPendingReadsSleepsBetweenTimerTicks) {
  Bridge bridge;
  auto& io = bridge.io();
  {
    // A read that never completes.
    auto quiet = MakeUnixPair(io);
    kj::byte buffer[8];
    Outcome<size_t> never;
    auto waiting = Track(quiet.b->tryRead(buffer, 1, sizeof(buffer)), never);

    // Unread data on a socket whose readable interest stayed armed after a
    // completed read, and a write that went through EAGAIN (writable armed,
    // then dropped): neither may keep waking the loop.
    auto busy = MakeUnixPair(io);
    ShrinkBuffers(*busy.a);
    auto big = MakePattern(3, 1 << 20);
    auto sink = kj::heapArray<kj::byte>(big.size());
    Outcome<size_t> read;
    auto reading = Track(busy.b->tryRead(sink.begin(), sink.size(), sink.size()), read);
    Outcome<void> wrote;
    auto writing = Track(busy.a->write(big.begin(), big.size()), wrote);
    ASSERT_TRUE(WaitUntil([&] { return read.done && wrote.done; }, LoopPasses(io)));
    Outcome<void> extra;
    auto writing_extra = Track(busy.a->write("unread", 6), extra);
    ASSERT_TRUE(WaitUntil([&] { return extra.done; }, LoopPasses(io)));

    LoopCounter iterations(io.loop());
    uint64_t slices_before = io.port().slices_run();
    UvRepeatingTimer tick(io.loop(), 5, [] {});
    tick.Start();
    ASSERT_TRUE(WaitUntil([&] { return tick.ticks() >= 20; }, LoopPasses(io)));
    EXPECT_FALSE(never.done);
    // A busy loop makes thousands of passes in 100 ms; a sleeping one about
    // one per tick.
    EXPECT_LT(iterations.count(), 3 * tick.ticks() + 10);
    EXPECT_LT(io.port().slices_run() - slices_before, 3 * tick.ticks() + 10);
  }
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvEventPort, EndlessKjWorkDoesNotStarveLibuvTimers) {
  Bridge bridge;
  auto& io = bridge.io();
  uint64_t turns = 0;
  bool starved;
  {
    Watchdog watchdog(10);
    bool done = false;
    std::function<bool()> stop = [&]() { return done || watchdog.expired(); };
    Outcome<void> spun;
    auto spinning = Track(Spin(stop, turns), spun);
    UvRepeatingTimer tick(io.loop(), 1, [] {});
    tick.Start();
    EXPECT_TRUE(WaitUntil([&] { return tick.ticks() >= 5 || watchdog.expired(); }, LoopPasses(io)));
    starved = watchdog.expired();
    done = true;
    tick.Stop();
    ASSERT_TRUE(WaitUntil([&] { return spun.done; }, LoopPasses(io)));
  }
  EXPECT_FALSE(starved) << "a libuv timer did not fire while KJ work kept coming";
  EXPECT_GT(turns, 5u);
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvEventPort, SlowKjTurnsEndASliceSoLibuvRunsBetweenThem) {
  Bridge bridge;
  auto& io = bridge.io();
  uint64_t turns = 0;
  uint64_t turns_at_fifth_tick = 0;
  {
    Watchdog watchdog(20);
    bool done = false;
    // Each turn works for 2 ms (a stand-in for producing a large element).
    std::function<bool()> stop = [&]() {
      const uint64_t until = uv_hrtime() + 2 * 1000 * 1000;
      while (uv_hrtime() < until) {
      }
      return done || watchdog.expired();
    };
    Outcome<void> spun;
    auto spinning = Track(Spin(stop, turns), spun);
    UvRepeatingTimer tick(io.loop(), 1, [] {});
    tick.Start();
    ASSERT_TRUE(WaitUntil([&] { return tick.ticks() >= 5 || watchdog.expired(); }, LoopPasses(io)));
    turns_at_fifth_tick = turns;
    done = true;
    tick.Stop();
    ASSERT_TRUE(WaitUntil([&] { return spun.done; }, LoopPasses(io)));
  }
  // Bounded by turns alone, a slice would run thousands of these before the
  // timer's first tick; bounded by time, one or two per tick.
  EXPECT_LT(turns_at_fifth_tick, 100u);
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvEventPort, ExecutorCallsFromAnotherThreadRunOnTheLoopThread) {
  Bridge bridge;
  auto& io = bridge.io();
  constexpr int kCalls = 200;
  const kj::Executor& executor = kj::getCurrentThreadExecutor();
  std::vector<std::thread::id> ran_on;
  {
    std::thread caller([&]() {
      for (int i = 0; i < kCalls; ++i) {
        executor.executeSync([&]() { ran_on.push_back(std::this_thread::get_id()); });
      }
    });
    bool all = WaitUntil([&] { return ran_on.size() == kCalls; }, LoopPasses(io));
    caller.join();
    ASSERT_TRUE(all) << ran_on.size() << " of " << kCalls << " calls ran";
  }
  for (auto id : ran_on) EXPECT_EQ(id, std::this_thread::get_id());
  EXPECT_EQ(bridge.Teardown(), 0);
}

TEST(UvEventPort, CrossThreadWakeDuringEndlessKjWorkDoesNotStarveLibuvTimers) {
  Bridge bridge;
  auto& io = bridge.io();
  const kj::Executor& executor = kj::getCurrentThreadExecutor();
  uint64_t turns = 0;
  bool starved;
  bool called = false;
  {
    Watchdog watchdog(10);
    bool done = false;
    std::function<bool()> stop = [&]() { return done || watchdog.expired(); };
    auto spinning = Spin(stop, turns).eagerlyEvaluate(nullptr);

    std::atomic<bool> sending{false};
    uint64_t ticks_after_send = 0;
    UvRepeatingTimer tick(io.loop(), 1, [&] { ticks_after_send += sending.load(); });
    tick.Start();
    std::thread caller([&]() {
      sending = true;
      executor.executeSync([&]() { called = true; });
    });
    // The wake-up arrives while KJ always has more work queued.
    EXPECT_TRUE(
        WaitUntil([&] { return ticks_after_send >= 30 || watchdog.expired(); }, LoopPasses(io)));
    starved = watchdog.expired();
    done = true;
    bool finished = WaitUntil([&] { return called; }, LoopPasses(io));
    caller.join();
    EXPECT_TRUE(finished) << "the cross-thread call never ran";
    tick.Stop();
  }
  EXPECT_FALSE(starved) << "libuv timers stopped while a cross-thread wake met busy KJ work";
  EXPECT_EQ(bridge.Teardown(), 0);
}

}  // namespace
}  // namespace dispatch::uvkj::testing
