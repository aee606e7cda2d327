// RAII for libuv handles and loops. A handle lives on the heap and is freed in
// its close callback, because libuv keeps touching it until that callback runs.
// UvLoop closes its loop only after a final uv_run has flushed every close
// callback, so a clean teardown always ends with uv_loop_close() == 0.
#pragma once

#include <uv.h>

#include <kj/debug.h>

namespace dispatch::uvkj {

// Starts the close of a handle made with `new T` and deletes it once libuv is
// done with it. Safe on nullptr. REQUIRES: loop thread.
template <typename T>
void CloseAndDelete(T* handle) {
  if (handle == nullptr) return;
  auto* base = reinterpret_cast<uv_handle_t*>(handle);
  base->data = nullptr;
  uv_close(base, [](uv_handle_t* h) { delete reinterpret_cast<T*>(h); });
}

// Throws a kj::Exception naming `what` when a libuv call failed.
inline void CheckUv(int rc, const char* what) {
  if (rc < 0) KJ_FAIL_REQUIRE("libuv call failed", what, uv_strerror(rc));
}

// Owns one uv_loop_t. Close() flushes pending close callbacks and returns what
// uv_loop_close() returned (0 when no handle leaked; UV_EBUSY otherwise).
class UvLoop {
 public:
  UvLoop() { CheckUv(uv_loop_init(&loop_), "uv_loop_init"); }
  ~UvLoop() {
    if (!closed_) Close();
  }
  UvLoop(const UvLoop&) = delete;
  UvLoop& operator=(const UvLoop&) = delete;

  uv_loop_t* get() { return &loop_; }

  int Close() {
    // Close callbacks run in the next loop pass; NOWAIT runs exactly that.
    uv_run(&loop_, UV_RUN_NOWAIT);
    int rc = uv_loop_close(&loop_);
    closed_ = rc == 0;
    return rc;
  }

 private:
  uv_loop_t loop_;
  bool closed_ = false;
};

}  // namespace dispatch::uvkj
