// LoopPasses: WaitUntil's `between` for a test that owns a libuv loop. Each
// Turn is one pass of the loop, which blocks until an event or the deadline,
// the way the dispatcher runs its loop; a pass whose callbacks made the
// condition true does not block in its poll phase (a prepare handle checks
// the condition just before it and stops the loop).
//   ASSERT_TRUE(WaitUntil([&] { return wrote.done; }, LoopPasses(io)));
#pragma once

#include <uv.h>

#include <chrono>

#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {

class LoopPasses {
 public:
  // Passes run by uv_run().
  explicit LoopPasses(uv_loop_t* loop) : LoopPasses(loop, nullptr) {}
  // Passes run by io.Run(), as the dispatcher runs its loop (KJ work included).
  explicit LoopPasses(uvkj::UvAsyncIo& io) : LoopPasses(io.loop(), &io) {}
  LoopPasses(const LoopPasses&) = delete;
  LoopPasses& operator=(const LoopPasses&) = delete;

  // REQUIRES: on the loop's thread, not inside the loop.
  void Turn(const WaitCondition& condition, std::chrono::milliseconds left);

 private:
  LoopPasses(uv_loop_t* loop, uvkj::UvAsyncIo* io);

  uv_loop_t* const loop_;
  uvkj::UvAsyncIo* const io_;
  uvkj::UvHandle<uv_timer_t> deadline_;  // keeps a pass from blocking past `left`
  uvkj::UvHandle<uv_prepare_t> check_;   // unref'd: never keeps the loop alive
};

}  // namespace dispatch::testing
