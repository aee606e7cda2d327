#include "reactor/uvkj/event_port.h"

#include <kj/debug.h>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::uvkj {

UvEventPort::UvEventPort(uv_loop_t* loop)
    : loop_(loop),
      idle_(loop, this, uv_idle_init),
      check_(loop, this, uv_check_init),
      prepare_(loop, this, uv_prepare_init),
      async_(loop, this, uv_async_init, &UvEventPort::OnAsync),
      kj_loop_(*this) {
  // The check handle runs after every I/O phase, the prepare handle right
  // before it. None of them may keep the loop alive by itself, hence unref.
  CheckUv(uv_check_start(check_.get(), &UvEventPort::OnCheck), "uv_check_start");
  CheckUv(uv_prepare_start(prepare_.get(), &UvEventPort::OnPrepare), "uv_prepare_start");
  uv_unref(check_.base());
  uv_unref(prepare_.base());
  uv_unref(async_.base());
}

UvEventPort::~UvEventPort() noexcept(false) {
  // kj_loop_ (declared last) is already gone; the handles close with their
  // members, and no callback of theirs runs after that.
  idle_armed_ = false;
}

int UvEventPort::Run(uv_run_mode mode) {
  KJ_REQUIRE(uv_depth_ == 0, "uv_run is not reentrant: Run() called from inside the loop");
  ++uv_depth_;
  int rc = uv_run(loop_, mode);
  --uv_depth_;
  return rc;
}

bool UvEventPort::wait() {
  // A wait() from inside a libuv callback would need a nested uv_run.
  KJ_REQUIRE(uv_depth_ == 0,
             "Promise::wait() called inside a libuv callback; store the promise in a "
             "kj::TaskSet or use .then() instead");
  // KJ calls wait() when its queue is empty: a pass has ended. Close it the
  // way a libuv-driven pass ends; if that made work (a commit releasing
  // parked replies), return to KJ instead of blocking.
  RunPassEndHook();
  if (kj_loop_.isRunnable()) return woken_.exchange(false);
  // KJ does not tell us "not runnable" before it blocks in wait(), so the idle
  // handle could stay armed and turn uv_run(ONCE) into a busy spin. Disarm it
  // for the duration and restore it from the loop's real state afterwards.
  ArmIdle(false);
  // With no active handle or request nothing in libuv can ever fire again,
  // so the awaited promise can never resolve: failing beats hanging. This is
  // checked before the pass, not after it: the pass that completes the
  // awaited promise (say, the writable event that ends a write) often leaves
  // no active handle behind, and KJ calls wait() again only if it is pending.
  if (!uv_loop_alive(loop_) && !woken_.load()) {
    KJ_FAIL_REQUIRE(
        "Promise::wait() on a promise that can never resolve: the libuv loop has no "
        "active handles left");
  }
  ++uv_depth_;
  in_wait_ = true;
  uv_run(loop_, UV_RUN_ONCE);
  in_wait_ = false;
  --uv_depth_;
  bool woken = woken_.exchange(false);
  ArmIdle(kj_loop_.isRunnable());
  return woken;
}

bool UvEventPort::poll() {
  if (uv_depth_ == 0) {
    ++uv_depth_;
    uv_run(loop_, UV_RUN_NOWAIT);
    --uv_depth_;
  }
  return woken_.exchange(false);
}

void UvEventPort::setRunnable(bool runnable) { ArmIdle(runnable); }

void UvEventPort::wake() const {
  woken_.store(true);
  // uv_async_send is the one libuv call that is safe from any thread.
  uv_async_send(async_.get());
}

void UvEventPort::ArmIdle(bool on) {
  if (!idle_ || on == idle_armed_) return;
  if (on) {
    uv_idle_start(idle_.get(), &UvEventPort::OnIdle);
  } else {
    uv_idle_stop(idle_.get());
  }
  idle_armed_ = on;
}

void UvEventPort::RunSlice() {
  if (kj_loop_.isRunnable()) {
    ++slices_run_;
    // Exceptions must not cross libuv's C frames. KJ turns failures inside
    // events into rejected promises; what still escapes is a bug we log.
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([this]() {
                   // The clock (a vDSO read, ~26 ns here) is read after every
                   // turn: one slow turn, such as producing a 1 MiB element,
                   // is enough to end a slice.
                   const uint64_t deadline = uv_hrtime() + kMaxSliceNanos;
                   for (uint turns = 0; turns < kMaxTurnsPerSlice; ++turns) {
                     kj_loop_.run(1);
                     if (!kj_loop_.isRunnable() || uv_hrtime() >= deadline) break;
                   }
                 })) {
      KJ_LOG(ERROR, "uncaught exception in a KJ event; continuing", *e);
    }
  }
  // (Inside a top-level wait(), KJ itself drains them once wait() returns.)
  if (xthread_pending_ && !in_wait_ && !kj_loop_.isRunnable()) DrainCrossThread();
  RunPassEndHook();
  ArmIdle(kj_loop_.isRunnable());
}

void UvEventPort::DrainCrossThread() {
  // WaitScope::poll() runs KJ until its queue is empty, with no bound: called
  // while KJ work is queued, it could hold libuv inside this one callback for
  // as long as that work keeps coming. So drain only from an empty queue, and
  // otherwise let the slice that empties it come back here. (KJ's own loop
  // also polls for cross-thread events only once its queue is empty.)
  if (kj_loop_.isRunnable()) {
    xthread_pending_ = true;
    ArmIdle(true);
    return;
  }
  xthread_pending_ = false;
  if (wait_scope_ != nullptr) {
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([this]() { wait_scope_->poll(); })) {
      KJ_LOG(ERROR, "exception while draining cross-thread events", *e);
    }
  }
  ArmIdle(kj_loop_.isRunnable());
}

void UvEventPort::RunPassEndHook() {
  if (!pass_end_hook_) return;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([this]() { pass_end_hook_(); })) {
    KJ_LOG(ERROR, "uncaught exception in the pass-end hook; continuing", *e);
  }
}

void UvEventPort::OnIdle(uv_idle_t* handle) {
  if (auto* self = static_cast<UvEventPort*>(handle->data)) self->RunSlice();
}

void UvEventPort::OnCheck(uv_check_t* handle) {
  if (auto* self = static_cast<UvEventPort*>(handle->data)) self->RunSlice();
}

void UvEventPort::OnPrepare(uv_prepare_t* handle) {
  // Work queued without a notice (see the header) must not wait for I/O:
  // an armed idle handle makes this pass's poll return at once.
  auto* self = static_cast<UvEventPort*>(handle->data);
  if (self != nullptr && self->kj_loop_.isRunnable()) self->ArmIdle(true);
}

void UvEventPort::OnAsync(uv_async_t* handle) {
  auto* self = static_cast<UvEventPort*>(handle->data);
  if (self == nullptr) return;
  // Within a top-level wait(), KJ drains cross-thread events itself once
  // wait() returns true. Otherwise only WaitScope::poll() queues them.
  if (self->in_wait_) return;
  self->DrainCrossThread();
}

}  // namespace dispatch::uvkj
