// ShutdownSignals: SIGINT and SIGTERM delivered on the loop thread through
// uv_signal, so a shutdown request is an ordinary loop event, never code
// running in a signal handler. The handles are unref'd: waiting for a signal
// alone does not keep the loop alive.
#pragma once

#include <uv.h>

#include <functional>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::reactor {

class ShutdownSignals {
 public:
  ShutdownSignals(uv_loop_t* loop, std::function<void(int signum)> on_signal);
  ~ShutdownSignals();
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

 private:
  static void OnSignal(uv_signal_t* handle, int signum);

  std::function<void(int)> on_signal_;
  uvkj::UvHandle<uv_signal_t> sigint_;
  uvkj::UvHandle<uv_signal_t> sigterm_;
};

}  // namespace dispatch::reactor
