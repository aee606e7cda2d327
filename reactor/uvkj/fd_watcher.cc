#include "reactor/uvkj/fd_watcher.h"

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::uvkj {

UvFdWatcher::UvFdWatcher(uv_loop_t* loop, int fd) : loop_(loop), fd_(fd) {
  // UvHandle would throw too, but without naming the descriptor.
  KJ_IF_MAYBE(e, kj::runCatchingExceptions(
                     [&]() { poll_ = UvHandle<uv_poll_t>(loop_, this, uv_poll_init_socket, fd_); })) {
    KJ_FAIL_REQUIRE("cannot watch file descriptor", fd, e->getDescription());
  }
}

// uv_close (in UvHandle's destructor) removes the descriptor from epoll
// before it returns, so the owner may close() the descriptor right after.
UvFdWatcher::~UvFdWatcher() = default;

bool UvFdWatcher::Waiting(kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>>& slot) {
  // A dropped promise leaves its fulfiller behind: ask it, don't test null.
  KJ_IF_MAYBE(f, slot) { return (*f)->isWaiting(); }
  return false;
}

void UvFdWatcher::Fulfill(kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>>& slot) {
  KJ_IF_MAYBE(f, slot) {
    if ((*f)->isWaiting()) (*f)->fulfill();
  }
  slot = nullptr;
}

kj::Promise<void> UvFdWatcher::WhenReadable() {
  auto paf = kj::newPromiseAndFulfiller<void>();
  readable_ = kj::mv(paf.fulfiller);
  Watch(watched_ | UV_READABLE);
  return kj::mv(paf.promise);
}

kj::Promise<void> UvFdWatcher::WhenWritable() {
  auto paf = kj::newPromiseAndFulfiller<void>();
  writable_ = kj::mv(paf.fulfiller);
  Watch(watched_ | UV_WRITABLE);
  return kj::mv(paf.promise);
}

kj::Promise<void> UvFdWatcher::WhenHangup() {
  if (hung_up_) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  hangup_ = kj::mv(paf.fulfiller);
  Watch(watched_ | UV_DISCONNECT);
  return kj::mv(paf.promise);
}

void UvFdWatcher::Watch(int events) {
  if (events == watched_) return;
  if (events == 0) {
    uv_poll_stop(poll_.get());
  } else {
    int rc = uv_poll_start(poll_.get(), events, &UvFdWatcher::OnPoll);
    if (rc < 0) {
      // The descriptor is unusable (closed under us, or epoll refused it).
      // Wake everyone: the next system call reports the real error.
      watched_ = 0;
      HandleEvents(rc, 0);
      return;
    }
  }
  watched_ = events;
}

void UvFdWatcher::OnPoll(uv_poll_t* handle, int status, int events) {
  if (auto* self = static_cast<UvFdWatcher*>(handle->data)) self->HandleEvents(status, events);
}

void UvFdWatcher::HandleEvents(int status, int events) {
  if (status < 0) {
    // libuv reports POLLERR as an error status and has already stopped the
    // handle; the waiters' next recv/send/accept will name the errno.
    watched_ = 0;
    hung_up_ = true;
    Fulfill(readable_);
    Fulfill(writable_);
    Fulfill(hangup_);
    return;
  }
  int next = watched_;
  if (events & UV_READABLE) {
    if (Waiting(readable_)) {
      Fulfill(readable_);
    } else {
      next &= ~UV_READABLE;  // nobody reads now: stop the level-triggered report
    }
  }
  if (events & UV_WRITABLE) {
    Fulfill(writable_);
    next &= ~UV_WRITABLE;
  }
  if (events & UV_DISCONNECT) {
    hung_up_ = true;
    Fulfill(hangup_);
    next &= ~UV_DISCONNECT;
  }
  Watch(next);
}

}  // namespace dispatch::uvkj
