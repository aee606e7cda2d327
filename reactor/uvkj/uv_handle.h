// RAII for libuv handles and loops. A handle lives on the heap and is freed in
// its close callback, because libuv keeps touching it until that callback runs.
// UvLoop closes its loop only after a final uv_run has flushed every close
// callback, so a clean teardown always ends with uv_loop_close() == 0.
#pragma once

#include <uv.h>

#include <utility>

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

// Owns one initialised libuv handle of type T (uv_timer_t, uv_async_t, ...).
// The destructor closes it and the close callback frees it, so an owner only
// declares the member; no owner writes `new uv_*_t` or a matching delete.
// Move-only. REQUIRES: created, reset and destroyed on the handle's loop thread.
//
//   UvHandle<uv_timer_t> timer(loop, this, uv_timer_init);
//   UvHandle<uv_async_t> wake(loop, this, uv_async_init, &Owner::OnWake);
template <typename T>
class UvHandle {
 public:
  UvHandle() = default;
  // Allocates a T, runs init(loop, handle, args...) and sets handle->data.
  // Throws (and frees the memory) if init fails: an uninitialised handle must
  // not reach uv_close.
  template <typename Init, typename... Args>
  UvHandle(uv_loop_t* loop, void* data, Init init, Args&&... args) : handle_(new T) {
    int rc = init(loop, handle_, std::forward<Args>(args)...);
    if (rc < 0) {
      delete handle_;
      handle_ = nullptr;
      CheckUv(rc, "handle init");
    }
    handle_->data = data;
  }
  ~UvHandle() { reset(); }
  UvHandle(UvHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  UvHandle& operator=(UvHandle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  UvHandle(const UvHandle&) = delete;
  UvHandle& operator=(const UvHandle&) = delete;

  T* get() const { return handle_; }
  T* operator->() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }
  uv_handle_t* base() const { return reinterpret_cast<uv_handle_t*>(handle_); }

  // Closes now; the memory goes in the close callback. Callbacks of this
  // handle never run after reset() returns (libuv guarantees that for closed
  // handles, and data is cleared for the ones that read it).
  void reset() { CloseAndDelete(std::exchange(handle_, nullptr)); }

 private:
  T* handle_ = nullptr;
};

// Owns one uv_loop_t. Close() flushes pending close callbacks, lets requests
// in flight come back (see below), and returns what uv_loop_close() returned
// (0 when no handle leaked; UV_EBUSY otherwise).
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
    // A request (thread-pool work, a file-system call) belongs to libuv until
    // its callback has run, and a thread finishing one writes to this loop.
    // Owners never wait for theirs when they go (PoolWork gives its job up,
    // an unlink finishes on its own): the loop's owner waits here, once,
    // outside every callback. Each such request ends by itself.
    while (loop_.active_reqs.count > 0) uv_run(&loop_, UV_RUN_ONCE);
    int rc = uv_loop_close(&loop_);
    closed_ = rc == 0;
    return rc;
  }

 private:
  uv_loop_t loop_;
  bool closed_ = false;
};

}  // namespace dispatch::uvkj
