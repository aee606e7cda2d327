#include "reactor/signals.h"

#include <signal.h>

#include <kj/debug.h>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::reactor {

ShutdownSignals::ShutdownSignals(uv_loop_t* loop, std::function<void(int)> on_signal)
    : on_signal_(std::move(on_signal)),
      sigint_(loop, this, uv_signal_init),
      sigterm_(loop, this, uv_signal_init) {
  for (auto [handle, signum] : {std::pair{&sigint_, SIGINT}, std::pair{&sigterm_, SIGTERM}}) {
    uvkj::CheckUv(uv_signal_start(handle->get(), &ShutdownSignals::OnSignal, signum),
                  "uv_signal_start");
    uv_unref(handle->base());
  }
}

ShutdownSignals::~ShutdownSignals() = default;

void ShutdownSignals::OnSignal(uv_signal_t* handle, int signum) {
  auto* self = static_cast<ShutdownSignals*>(handle->data);
  if (self == nullptr) return;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { self->on_signal_(signum); })) {
    KJ_LOG(ERROR, "exception in the signal callback", *e);
  }
}

}  // namespace dispatch::reactor
