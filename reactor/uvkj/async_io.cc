#include "reactor/uvkj/async_io.h"

#include <kj/debug.h>

namespace dispatch::uvkj {

UvAsyncIo::UvAsyncIo(uv_loop_t* loop)
    : timer_(loop),
      low_level_(kj::heap<UvLowLevelIoProvider>(loop, timer_)),
      provider_(kj::newAsyncIoProvider(*low_level_)),
      port_(loop),
      wait_scope_(port_.kj_loop()) {
  port_.set_wait_scope(&wait_scope_);
}

UvAsyncIo::~UvAsyncIo() noexcept(false) { port_.set_wait_scope(nullptr); }

kj::WaitScope& UvAsyncIo::wait_scope() {
  KJ_REQUIRE(!port_.InsideUv(),
             "Promise::wait() is not allowed inside a libuv callback: the loop would have to "
             "re-enter uv_run. Chain with .then() or add the promise to a kj::TaskSet.");
  return wait_scope_;
}

}  // namespace dispatch::uvkj
