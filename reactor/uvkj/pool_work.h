// PoolWork<Job>: owns the one job an object runs on libuv's thread pool, as
// UvHandle owns a handle. The job holds everything the pool thread touches
// (nothing borrowed from its owner), which is what makes the rule simple:
//   - Start() runs job->Run() on a pool thread, then hands the job back to
//     `done` on the loop thread;
//   - destroying the PoolWork (or Abandon()) gives the job up: one that has
//     not started never runs (uv_cancel); one that is running sees
//     cancelled() turn true and is freed where libuv hands it back, without
//     calling `done` or touching the owner. Nobody waits, no destructor runs
//     the loop; the loop's owner lets the request come back before closing
//     the loop (UvLoop::Close() does).
// An owner that must know its job is over (a Store closing under it) awaits
// that explicitly before it goes: see DurableState::StopBackgroundWork().
// REQUIRES: loop thread, except PoolJob::Run() and PoolJob::cancelled().
#pragma once

#include <uv.h>

#include <atomic>
#include <functional>
#include <memory>
#include <utility>

namespace dispatch::uvkj {

// Base of a job: Run() on a pool thread, and a flag the owner raises to ask
// a long job to stop early (the job decides where it looks).
class PoolJob {
 public:
  virtual ~PoolJob() = default;
  virtual void Run() = 0;
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // Any thread. PoolWork raises it when it gives the job up.
  void Cancel() { cancelled_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool> cancelled_{false};
};

template <typename Job>
class PoolWork {
 public:
  using DoneFn = std::function<void(std::unique_ptr<Job>)>;

  explicit PoolWork(uv_loop_t* loop) : loop_(loop) {}
  ~PoolWork() { Abandon(); }
  PoolWork(const PoolWork&) = delete;
  PoolWork& operator=(const PoolWork&) = delete;

  bool in_flight() const { return request_ != nullptr; }
  // The job while it runs (to Cancel() it and still get it back).
  // REQUIRES: in_flight().
  Job& job() { return *request_->job; }
  const Job& job() const { return *request_->job; }

  // Queues `job`; `done` runs once on the loop thread when it is back.
  // On success takes the job and returns 0; on failure leaves it with the
  // caller and returns libuv's error. REQUIRES: !in_flight().
  int Start(std::unique_ptr<Job>& job, DoneFn done) {
    auto request = std::make_unique<Request>();
    request->work.data = request.get();
    request->owner = this;
    request->job = std::move(job);
    request->done = std::move(done);
    const int rc = uv_queue_work(loop_, &request->work, &PoolWork::OnWork, &PoolWork::OnAfterWork);
    if (rc < 0) {
      job = std::move(request->job);
      return rc;
    }
    request_ = request.release();  // libuv's until OnAfterWork
    return 0;
  }

  // Gives the job in flight up (see above); a no-op when idle.
  void Abandon() {
    Request* request = std::exchange(request_, nullptr);
    if (request == nullptr) return;
    request->owner = nullptr;
    request->job->Cancel();
    // Fails with UV_EBUSY once the job runs; it then ends by itself.
    uv_cancel(reinterpret_cast<uv_req_t*>(&request->work));
  }

 private:
  struct Request {
    uv_work_t work;
    PoolWork* owner = nullptr;  // null once given up
    std::unique_ptr<Job> job;
    DoneFn done;
  };

  static void OnWork(uv_work_t* work) { static_cast<Request*>(work->data)->job->Run(); }

  static void OnAfterWork(uv_work_t* work, int status) {
    std::unique_ptr<Request> request(static_cast<Request*>(work->data));
    if (request->owner == nullptr) return;  // given up: free the job, call nobody
    request->owner->request_ = nullptr;
    // Only Abandon() cancels, and it clears `owner` first.
    (void)status;
    DoneFn done = std::move(request->done);
    done(std::move(request->job));
  }

  uv_loop_t* const loop_;
  Request* request_ = nullptr;
};

}  // namespace dispatch::uvkj
