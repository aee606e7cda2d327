// LoopThread: one thread running one libuv loop with the KJ bridge on it
// (UvAsyncIo), for the clients that embed a loop in someone else's program
// (Coordinator, WorkerAgent, DatasetReader). The owner's loop-side objects,
// its Body, are built by a setup function on that thread and destroyed there,
// before the loop closes. Other threads reach the loop only through Post()
// and RunAndWait(); Start() and Stop() may race with both and with each other.
// Invariant: no posted function and no RunAndWait() promise outlives the Body;
// a caller waiting in RunAndWait() always gets an answer, Unavailable at worst.
#pragma once

#include <kj/async.h>
#include <kj/memory.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::clients {

using uvkj::UvAsyncIo;

class LoopThread {
 public:
  // What an owner keeps on the loop thread: sessions, task tables, promises.
  // Destroyed on the loop thread after every posted function and every
  // RunAndWait() promise is gone, and before the loop closes.
  class Body {
   public:
    virtual ~Body() noexcept(false) = default;
  };
  // Runs on the loop thread, once. Throwing fails Start() with the thrown
  // error (its Status code when it carries one, else Internal).
  using Setup = std::function<kj::Own<Body>(UvAsyncIo& io)>;

  // `name` names the owner in errors and log lines ("coordinator").
  explicit LoopThread(std::string name);
  // Stop(). REQUIRES: not on the loop thread.
  ~LoopThread();
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;

  // Starts the thread and runs `setup` there; returns once the loop is up
  // (Ok) or setup failed (its error; the thread is gone again).
  // FailedPrecondition on a second call, whatever became of the first.
  Status Start(Setup setup);

  // Runs `function` on the loop thread soon, in the order of posting.
  // Returns false and drops it (destroys it, never runs it) when the loop
  // does not take functions: before Start(), after a failed one, and once
  // Stop() was called. A function that throws is logged; the loop goes on.
  // Any thread.
  bool Post(std::function<void()> function);

  // Runs `start` on the loop thread and blocks the caller until the promise
  // it returns settles: Ok, or the error it (or `start`) threw as a Status.
  // Unavailable ("the <name> is closed") when the loop stops first: the
  // promise is cancelled with the Body, so this never waits forever.
  // REQUIRES: not on the loop thread (it would wait for itself).
  Status RunAndWait(std::function<kj::Promise<void>()> start);
  template <typename T>
  Result<T> RunAndWait(std::function<kj::Promise<T>()> start);

  // Stops the loop after the functions posted so far have run, cancels the
  // RunAndWait() promises, destroys the Body on the loop thread, closes the
  // loop and joins the thread. Idempotent; a no-op before Start() or after a
  // failed one; a second caller waits until the thread is gone.
  // REQUIRES: not on the loop thread (KJ_REQUIRE: it would join itself).
  void Stop();

  // Whether Start() was called (successfully or not).
  bool WasStarted() const;
  bool OnLoopThread() const;
  // What uv_loop_close() returned when the thread ended: 0 when every handle
  // was closed; nullopt while it runs or if it never ran.
  std::optional<int> loop_close_result() const;

 private:
  class TaskErrors;

  void ThreadMain(Setup setup);
  // The part of ThreadMain that has a loop: setup, run, teardown.
  void RunLoop(UvAsyncIo& io, Setup& setup, bool& setup_done);
  void ReportStart(Status status);
  static void OnWake(uv_async_t* handle);
  // Loop thread: runs what was posted; on a Stop() request, ends the run.
  void DrainCommands();
  // Loop thread: Post() takes nothing more; what it took and nobody ran is
  // dropped (destroyed outside the lock).
  void CloseMailbox();
  Status Closed() const;

  const std::string name_;
  std::mutex control_mu_;  // serialises Start() and Stop(): thread_ is theirs
  std::thread thread_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable started_cv_;
  bool start_called_ = false;
  bool start_reported_ = false;
  Status start_status_;
  bool stop_requested_ = false;
  std::thread::id loop_thread_id_;  // while the thread runs
  uv_async_t* wake_ = nullptr;      // while Post() takes functions
  std::vector<std::function<void()>> commands_;
  std::optional<int> close_result_;

  // Loop thread only.
  UvAsyncIo* io_ = nullptr;
  kj::TaskSet* tasks_ = nullptr;  // RunAndWait() promises
  bool stopping_ = false;         // DrainCommands saw the Stop() request
};

template <typename T>
Result<T> LoopThread::RunAndWait(std::function<kj::Promise<T>()> start) {
  auto value = std::make_shared<std::optional<T>>();
  Status status =
      RunAndWait(std::function<kj::Promise<void>()>([start = std::move(start), value]() {
        return start().then([value](T&& v) { value->emplace(kj::mv(v)); });
      }));
  if (!status.ok()) return status;
  return std::move(**value);
}

}  // namespace dispatch::clients
