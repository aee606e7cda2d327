#include "clients/loop_thread.h"

#include <kj/debug.h>

#include <future>

#include "common/log.h"
#include "common/rpc_status.h"
#include "reactor/uvkj/uv_handle.h"

namespace dispatch::clients {

using uvkj::UvHandle;
using uvkj::UvLoop;

namespace {

// The answer a RunAndWait() caller waits for. Whoever drops the last copy
// without answering (a function never run, a promise cancelled with the
// Body) answers Unavailable, so no caller waits forever.
class Reply {
 public:
  explicit Reply(Status closed) : closed_(std::move(closed)) {}
  ~Reply() {
    if (!set_) promise_.set_value(closed_);
  }
  Reply(const Reply&) = delete;
  Reply& operator=(const Reply&) = delete;

  void Set(Status status) {
    if (set_) return;
    set_ = true;
    promise_.set_value(std::move(status));
  }
  std::future<Status> future() { return promise_.get_future(); }

 private:
  const Status closed_;
  std::promise<Status> promise_;
  bool set_ = false;
};

}  // namespace

class LoopThread::TaskErrors final : public kj::TaskSet::ErrorHandler {
 public:
  explicit TaskErrors(const std::string& name) : name_(name) {}
  void taskFailed(kj::Exception&& e) override {
    Log(LogLevel::kWarning, name_.c_str(), ": ", e.getDescription());
  }

 private:
  const std::string& name_;
};

LoopThread::LoopThread(std::string name) : name_(std::move(name)) {}

LoopThread::~LoopThread() { Stop(); }

Status LoopThread::Closed() const { return UnavailableError("the " + name_ + " is closed"); }

bool LoopThread::WasStarted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return start_called_;
}

bool LoopThread::OnLoopThread() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loop_thread_id_ == std::this_thread::get_id();
}

std::optional<int> LoopThread::loop_close_result() const {
  std::lock_guard<std::mutex> lock(mu_);
  return close_result_;
}

Status LoopThread::Start(Setup setup) {
  std::lock_guard<std::mutex> control(control_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (start_called_) return FailedPreconditionError("the " + name_ + " was already started");
    start_called_ = true;
  }
  thread_ =
      std::thread([this, setup = std::move(setup)]() mutable { ThreadMain(std::move(setup)); });
  Status status;
  {
    std::unique_lock<std::mutex> lock(mu_);
    started_cv_.wait(lock, [this] { return start_reported_; });
    status = start_status_;
  }
  if (!status.ok()) {
    thread_.join();  // it ends by itself after a failed setup
    std::lock_guard<std::mutex> lock(mu_);
    loop_thread_id_ = std::thread::id();
  }
  return status;
}

bool LoopThread::Post(std::function<void()> function) {
  std::unique_lock<std::mutex> lock(mu_);
  if (wake_ == nullptr || stop_requested_) {
    lock.unlock();
    function = nullptr;  // dropped outside the lock: it may hold a Reply
    return false;
  }
  commands_.push_back(std::move(function));
  uv_async_send(wake_);  // the one libuv call that is safe from any thread
  return true;
}

Status LoopThread::RunAndWait(std::function<kj::Promise<void>()> start) {
  KJ_REQUIRE(!OnLoopThread(), "RunAndWait() called on the loop thread; it would wait for itself",
             name_.c_str());
  std::future<Status> answer;
  {
    // Only the posted function holds the reply from here on: when the loop
    // drops it, the reply answers.
    auto reply = std::make_shared<Reply>(Closed());
    answer = reply->future();
    bool posted = Post([this, start = std::move(start), reply]() {
      kj::Promise<void> promise = nullptr;
      KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { promise = start(); })) {
        reply->Set(StatusFromException(*e));
        return;
      }
      tasks_->add(promise.then([reply]() { reply->Set(Status::Ok()); },
                               [reply](kj::Exception&& e) { reply->Set(StatusFromException(e)); }));
    });
    if (!posted) return Closed();
  }
  return answer.get();
}

void LoopThread::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    KJ_REQUIRE(loop_thread_id_ != std::this_thread::get_id(),
               "Stop() called on the loop thread (from a posted function or a promise); it "
               "would wait for itself",
               name_.c_str());
  }
  std::lock_guard<std::mutex> control(control_mu_);
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_requested_ = true;
    if (wake_ != nullptr) uv_async_send(wake_);
  }
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  loop_thread_id_ = std::thread::id();  // ids are reused once a thread is joined
}

void LoopThread::ReportStart(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  start_status_ = std::move(status);
  start_reported_ = true;
  started_cv_.notify_all();
}

void LoopThread::ThreadMain(Setup setup) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    loop_thread_id_ = std::this_thread::get_id();
  }
  std::optional<UvLoop> loop;
  bool setup_done = false;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 loop.emplace();
                 UvAsyncIo io(loop->get());
                 RunLoop(io, setup, setup_done);
                 // Close callbacks and the KJ events the Body's destructor left.
                 io.wait_scope().poll();
               })) {
    if (setup_done) {
      Log(LogLevel::kError, name_.c_str(), " thread failed: ", e->getDescription());
    } else {
      Status failed = StatusFromException(*e);
      Log(LogLevel::kError, name_.c_str(), " thread failed to start: ", e->getDescription());
      ReportStart(Status(failed.code(), name_ + ": " + failed.message()));
    }
  }
  if (!loop.has_value()) return;
  int rc = loop->Close();
  if (rc != 0) {
    Log(LogLevel::kError, name_.c_str(),
        ": a libuv handle outlived the loop (uv_loop_close: ", uv_strerror(rc), ")");
  }
  std::lock_guard<std::mutex> lock(mu_);
  close_result_ = rc;
}

void LoopThread::RunLoop(UvAsyncIo& io, Setup& setup, bool& setup_done) {
  TaskErrors errors(name_);
  // Destroyed in reverse: the mailbox closes, then the wake handle, the
  // RunAndWait() promises and last the Body, also when something throws.
  kj::Own<Body> body = setup(io);
  kj::Own<kj::TaskSet> tasks = kj::heap<kj::TaskSet>(errors);
  // Referenced: it keeps the loop alive until Stop(), whatever else is pending.
  UvHandle<uv_async_t> wake(io.loop(), this, uv_async_init, &LoopThread::OnWake);
  KJ_DEFER(CloseMailbox());
  io_ = &io;
  tasks_ = tasks.get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = wake.get();
  }
  setup_done = true;
  ReportStart(Status::Ok());

  DrainCommands();  // a Stop() that came before wake_ existed
  if (!stopping_) io.Run();

  CloseMailbox();
  wake.reset();
  io_ = nullptr;
  tasks_ = nullptr;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { tasks = nullptr; })) {
    Log(LogLevel::kError, name_.c_str(),
        ": cancelling a waited-for promise threw: ", e->getDescription());
  }
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { body = nullptr; })) {
    Log(LogLevel::kError, name_.c_str(),
        ": destroying the loop's objects threw: ", e->getDescription());
  }
}

void LoopThread::CloseMailbox() {
  std::vector<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = nullptr;
    dropped.swap(commands_);
  }
}

void LoopThread::OnWake(uv_async_t* handle) {
  if (auto* self = static_cast<LoopThread*>(handle->data)) self->DrainCommands();
}

void LoopThread::DrainCommands() {
  std::vector<std::function<void()>> commands;
  bool stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands.swap(commands_);
    stop = stop_requested_;
  }
  for (auto& command : commands) {
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { command(); })) {
      Log(LogLevel::kWarning, name_.c_str(), ": a posted function failed: ", e->getDescription());
    }
    command = nullptr;  // what it captured goes now, on the loop thread
  }
  if (stop && !stopping_) {
    stopping_ = true;
    // Before the run (a Stop() that came during setup) there is no uv_run
    // to stop: RunLoop skips it. A uv_stop() then would eat the next pass.
    if (io_->port().InsideUv()) io_->Stop();
  }
}

}  // namespace dispatch::clients
