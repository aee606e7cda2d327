// Teardown order: promises, streams, listeners and timers first, then the
// UvAsyncIo (WaitScope, port), then UvLoop::Close() == 0. And the check
// itself can fail: a leaked handle makes Close() return UV_EBUSY.
#include <gtest/gtest.h>
#include <kj/debug.h>

#include "reactor/uvkj/repeating_timer.h"
#include "reactor/uvkj/socket_stream.h"
#include "tests/uvkj/test_util.h"

namespace dispatch::uvkj::testing {
namespace {

TEST(UvLoopTeardown, DocumentedOrderLeavesNoHandleBehind) {
  UvLoop loop;
  {
    auto io = kj::heap<UvAsyncIo>(loop.get());
    {
      auto pair = MakeTcpPair(*io);
      auto listener = io->network().parseAddress("127.0.0.1:0").wait(io->wait_scope())->listen();
      UvRepeatingTimer tick(loop.get(), 1, [] {});
      tick.Start();

      // Some I/O and timers, then promises left pending at teardown.
      Outcome<void> wrote;
      auto writing = Track(pair.a->write("x", 1), wrote);
      kj::byte byte;
      Outcome<size_t> read;
      auto reading = Track(pair.b->tryRead(&byte, 1, 1), read);
      Outcome<void> slept;
      auto sleeping = Track(io->timer().afterDelay(2 * kj::MILLISECONDS), slept);
      ASSERT_TRUE(
          WaitUntil([&] { return wrote.done && read.done && slept.done && tick.ticks() >= 2; },
                    LoopPasses(*io)));

      Outcome<size_t> never_read;
      auto pending_read = Track(pair.a->tryRead(&byte, 1, 1), never_read);
      Outcome<kj::Own<kj::AsyncIoStream>> never_accepted;
      auto pending_accept = Track(listener->accept(), never_accepted);
      Outcome<void> never_slept;
      auto pending_sleep = Track(io->timer().afterDelay(3600 * kj::SECONDS), never_slept);
      io->Run(UV_RUN_NOWAIT);
      EXPECT_FALSE(never_read.done || never_accepted.done || never_slept.done);
    }              // promises, then streams, listener and timer go (reverse declaration order)
    io = nullptr;  // WaitScope, timer, provider, port
  }
  EXPECT_EQ(loop.Close(), 0);
}

TEST(UvLoopTeardown, LeakedUvHandleMakesCloseFail) {
  UvLoop loop;
  auto* leaked = new uv_timer_t;
  ASSERT_EQ(uv_timer_init(loop.get(), leaked), 0);
  EXPECT_EQ(loop.Close(), UV_EBUSY);
  CloseAndDelete(leaked);  // now clean up, and the same check passes
  EXPECT_EQ(loop.Close(), 0);
}

TEST(UvHandleOwnership, DestroyingTheOwnerClosesAndFreesTheHandle) {
  UvLoop loop;
  int fired = 0;
  {
    UvHandle<uv_timer_t> timer(loop.get(), &fired, uv_timer_init);
    ASSERT_EQ(uv_timer_start(
                  timer.get(), [](uv_timer_t* t) { ++*static_cast<int*>(t->data); }, 0, 0),
              0);
    EXPECT_NE(uv_loop_alive(loop.get()), 0);  // alive while owned
  }
  // Close() runs the loop once: a due timer still open would fire there.
  EXPECT_EQ(loop.Close(), 0);
  EXPECT_EQ(fired, 0);
}

TEST(UvHandleOwnership, MovedHandleIsClosedOnceByItsLastOwner) {
  UvLoop loop;
  UvHandle<uv_async_t> first(loop.get(), nullptr, uv_async_init, [](uv_async_t*) {});
  UvHandle<uv_async_t> second = std::move(first);
  EXPECT_FALSE(first);
  ASSERT_TRUE(second);
  first.reset();  // a moved-from owner closes nothing
  EXPECT_EQ(loop.Close(), UV_EBUSY);
  second.reset();
  EXPECT_FALSE(second);
  EXPECT_EQ(loop.Close(), 0);
}

TEST(UvHandleOwnership, FailedInitThrowsAndLeavesNothingToClose) {
  UvLoop loop;
  // uv_poll_init refuses a negative descriptor.
  EXPECT_ANY_THROW((UvHandle<uv_poll_t>(loop.get(), nullptr, uv_poll_init, -1)));
  EXPECT_EQ(loop.Close(), 0);
}

TEST(UvLoopTeardown, StreamOutlivingTheBridgeMakesCloseFail) {
  UvLoop loop;
  kj::Own<kj::AsyncIoStream> survivor;
  {
    auto io = kj::heap<UvAsyncIo>(loop.get());
    auto pair = MakeUnixPair(*io);
    survivor = kj::mv(pair.a);
    pair.b = nullptr;
    io = nullptr;
  }
  EXPECT_EQ(loop.Close(), UV_EBUSY);
  survivor = nullptr;
  EXPECT_EQ(loop.Close(), 0);
}

}  // namespace
}  // namespace dispatch::uvkj::testing
