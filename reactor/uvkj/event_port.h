// UvEventPort: runs Cap'n Proto's KJ event loop inside one libuv loop, on one
// thread, with no second event loop. libuv owns the thread (uv_run); KJ work
// runs in bounded slices from an idle handle (only while KJ is runnable, so an
// idle process blocks in epoll) and from a check handle (right after I/O, so a
// reply goes out in the same loop pass as the request that caused it). KJ's
// "runnable" notices are not enough to arm the idle handle: KJ sends one only
// when its own notion changes, and the turns of a top-level wait() empty the
// queue without updating that notion, so work queued by a libuv callback
// right after can come with no notice. A prepare handle therefore looks at
// the queue itself right before libuv would block in poll.
// Invariant: uv_run is never entered twice; Promise::wait() inside a libuv
// callback throws instead of re-entering it.
#pragma once

#include <kj/async.h>
#include <uv.h>

#include <atomic>
#include <cstdint>
#include <functional>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::uvkj {

class UvEventPort final : public kj::EventPort {
 public:
  // At most this many KJ events, and for about this long, run per slice, so a
  // flood of KJ work (a producer filling its buffer, a burst of replies)
  // cannot starve libuv timers and sockets.
  static constexpr uint kMaxTurnsPerSlice = 4096;
  static constexpr uint64_t kMaxSliceNanos = 500 * 1000;

  explicit UvEventPort(uv_loop_t* loop);
  ~UvEventPort() noexcept(false);
  UvEventPort(const UvEventPort&) = delete;
  UvEventPort& operator=(const UvEventPort&) = delete;

  kj::EventLoop& kj_loop() { return kj_loop_; }
  uv_loop_t* uv_loop() const { return loop_; }

  // Gives the port the thread's WaitScope, so a cross-thread wake() can drain
  // kj::Executor events (only WaitScope::poll() does that in capnp 0.9.2).
  void set_wait_scope(kj::WaitScope* scope) { wait_scope_ = scope; }

  // The one uv_run of this thread. REQUIRES: not already inside uv_run.
  int Run(uv_run_mode mode);

  // True while a libuv callback may be on the stack (inside uv_run).
  bool InsideUv() const { return uv_depth_ > 0; }

  // Stops the uv loop after the current pass (uv_stop).
  void Stop() { uv_stop(loop_); }

  uint64_t slices_run() const { return slices_run_; }

  // Runs after every KJ slice and at every check phase (after I/O), on the
  // loop thread: the place for work that must close a loop pass, such as the
  // group commit that releases the replies parked during the pass.
  void SetPassEndHook(std::function<void()> hook) { pass_end_hook_ = std::move(hook); }

  // kj::EventPort. wait() and poll() serve only a top-level Promise::wait()
  // (start-up, tests, clients that block on purpose).
  bool wait() override;
  bool poll() override;
  void setRunnable(bool runnable) override;
  void wake() const override;

 private:
  static void OnIdle(uv_idle_t* handle);
  static void OnCheck(uv_check_t* handle);
  static void OnPrepare(uv_prepare_t* handle);
  static void OnAsync(uv_async_t* handle);

  // Runs one bounded slice of KJ work and arms or disarms the idle handle.
  void RunSlice();
  void ArmIdle(bool on);
  // Queues kj::Executor events through WaitScope::poll(), or, while KJ work
  // is queued, defers that to the slice that empties the queue.
  void DrainCrossThread();
  void RunPassEndHook();

  uv_loop_t* const loop_;
  UvHandle<uv_idle_t> idle_;
  UvHandle<uv_check_t> check_;
  UvHandle<uv_prepare_t> prepare_;
  UvHandle<uv_async_t> async_;
  bool idle_armed_ = false;
  int uv_depth_ = 0;
  bool in_wait_ = false;          // inside a top-level wait()'s uv_run
  bool xthread_pending_ = false;  // a wake() arrived while KJ work was queued
  uint64_t slices_run_ = 0;
  mutable std::atomic<bool> woken_{false};
  kj::WaitScope* wait_scope_ = nullptr;
  std::function<void()> pass_end_hook_;
  // Declared last: destroyed first, while the handles it may still signal
  // (setRunnable, a cross-thread wake) are open.
  kj::EventLoop kj_loop_;
};

}  // namespace dispatch::uvkj
