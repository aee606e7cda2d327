// UvFdWatcher: readiness of one file descriptor, from a uv_poll_t, as KJ
// promises. uv_poll is level-triggered, so interest is kept minimal:
//   - readable stays armed after it fires (the RPC read loop asks again at
//     once; re-arming per message would cost epoll_ctl calls) and is dropped
//     only when it fires with nobody waiting;
//   - writable is dropped as soon as it fires (a writable socket is almost
//     always writable: keeping it armed would spin the loop);
//   - disconnect (peer hang-up) is reported once and remembered.
// An error on the descriptor wakes every waiter; the next system call on the
// descriptor reports the real errno. Does not own the descriptor.
#pragma once

#include <uv.h>

#include <kj/async.h>

#include "reactor/uvkj/uv_handle.h"

namespace dispatch::uvkj {

class UvFdWatcher {
 public:
  // Throws if libuv refuses the descriptor (e.g. it is already watched by
  // another handle of the same loop, or it is a regular file).
  UvFdWatcher(uv_loop_t* loop, int fd);
  ~UvFdWatcher();
  UvFdWatcher(const UvFdWatcher&) = delete;
  UvFdWatcher& operator=(const UvFdWatcher&) = delete;

  int fd() const { return fd_; }

  kj::Promise<void> WhenReadable();
  kj::Promise<void> WhenWritable();
  // Resolves once the peer hung up (EPOLLRDHUP / EPOLLHUP) or the descriptor
  // reported an error.
  kj::Promise<void> WhenHangup();

 private:
  static void OnPoll(uv_poll_t* handle, int status, int events);
  void HandleEvents(int status, int events);
  // Makes libuv watch exactly `events` (0 stops watching).
  void Watch(int events);
  static bool Waiting(kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>>& slot);
  static void Fulfill(kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>>& slot);

  uv_loop_t* const loop_;
  const int fd_;
  UvHandle<uv_poll_t> poll_;
  int watched_ = 0;  // the events libuv currently watches for us
  bool hung_up_ = false;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> readable_;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> writable_;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> hangup_;
};

}  // namespace dispatch::uvkj
