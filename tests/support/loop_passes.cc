#include "tests/support/loop_passes.h"

namespace dispatch::testing {

LoopPasses::LoopPasses(uv_loop_t* loop, uvkj::UvAsyncIo* io)
    : loop_(loop),
      io_(io),
      deadline_(loop, nullptr, uv_timer_init),
      check_(loop, nullptr, uv_prepare_init) {
  uvkj::CheckUv(uv_prepare_start(check_.get(),
                                 [](uv_prepare_t* p) {
                                   auto* condition = static_cast<const WaitCondition*>(p->data);
                                   if (condition != nullptr && (*condition)()) uv_stop(p->loop);
                                 }),
                "uv_prepare_start");
  uv_unref(check_.base());
}

void LoopPasses::Turn(const WaitCondition& condition, std::chrono::milliseconds left) {
  check_->data = const_cast<WaitCondition*>(&condition);
  // From the current time, not the time the loop cached at its last pass.
  uv_update_time(loop_);
  uvkj::CheckUv(uv_timer_start(
                    deadline_.get(), [](uv_timer_t*) {}, left.count(), 0),
                "uv_timer_start");
  if (io_ != nullptr) {
    io_->Run(UV_RUN_ONCE);
  } else {
    uv_run(loop_, UV_RUN_ONCE);
  }
  check_->data = nullptr;
}

}  // namespace dispatch::testing
