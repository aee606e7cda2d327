#include "clients/coordinator.h"

#include <kj/debug.h>

#include <future>
#include <random>

#include "common/address.h"
#include "common/log.h"
#include "common/rpc_status.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"

namespace dispatch::clients {

Status ValidateCoordinatorOptions(const CoordinatorOptions& o) {
  Result<std::string> address = ToKjAddress(o.dispatcher_address);
  if (!address.ok())
    return InvalidArgumentError("dispatcher address: " + address.status().message());
  if (o.max_schedule_batch == 0) return InvalidArgumentError("max_schedule_batch must be > 0");
  if (o.max_schedule_calls_in_flight == 0) {
    return InvalidArgumentError("max_schedule_calls_in_flight must be > 0");
  }
  if (o.max_unacknowledged == 0) return InvalidArgumentError("max_unacknowledged must be > 0");
  if (o.max_schedule_bytes == 0) return InvalidArgumentError("max_schedule_bytes must be > 0");
  if (o.max_closure_bytes == 0 || o.max_closure_bytes > o.max_schedule_bytes) {
    return InvalidArgumentError("max_closure_bytes must be > 0 and at most max_schedule_bytes");
  }
  if (o.connect_timeout_ms == 0) return InvalidArgumentError("connect timeout must be > 0");
  if (o.backoff_initial_ms == 0 || o.backoff_initial_ms > o.backoff_max_ms) {
    return InvalidArgumentError("backoff bounds must satisfy 0 < initial <= max");
  }
  return Status::Ok();
}

// The loop thread's objects.
class Coordinator::Loop final : public kj::TaskSet::ErrorHandler {
 public:
  Loop(uvkj::UvAsyncIo& io, const CoordinatorOptions& options, uint64_t coordinator_id,
       ClosureBook& book)
      : io_(io), session_(io.timer(), io.network(), options, coordinator_id, book), tasks_(*this) {}

  uvkj::UvAsyncIo& io() { return io_; }
  CoordinatorSession& session() { return session_; }
  kj::TaskSet& tasks() { return tasks_; }
  void taskFailed(kj::Exception&& e) override {
    Log(LogLevel::kWarning, "coordinator: ", e.getDescription());
  }

 private:
  uvkj::UvAsyncIo& io_;
  CoordinatorSession session_;
  kj::TaskSet tasks_;  // declared last: cancelled first
};

namespace {

// A reply a caller thread waits for. When the loop drops the work without
// answering (the coordinator closed), the destructor answers Unavailable, so
// no caller waits forever.
template <typename T>
class Reply {
 public:
  ~Reply() {
    if (!set_) promise_.set_value(UnavailableError("the coordinator is closed"));
  }
  void Set(Result<T> value) {
    if (set_) return;
    set_ = true;
    promise_.set_value(std::move(value));
  }
  std::future<Result<T>> future() { return promise_.get_future(); }

 private:
  std::promise<Result<T>> promise_;
  bool set_ = false;
};

}  // namespace

template <typename T>
Result<T> Coordinator::RunOnLoop(std::function<kj::Promise<T>(Loop&)> start) {
  std::future<Result<T>> future;
  {
    auto reply = std::make_shared<Reply<T>>();
    future = reply->future();
    bool posted = Post([this, start, reply]() {
      kj::Promise<T> promise = nullptr;
      KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { promise = start(*loop_); })) {
        reply->Set(StatusFromException(*e));
        return;
      }
      loop_->tasks().add(
          promise.then([reply](T&& value) { reply->Set(std::move(value)); },
                       [reply](kj::Exception&& e) { reply->Set(StatusFromException(e)); }));
    });
    if (!posted) return UnavailableError("the coordinator is closed");
  }
  return future.get();
}

namespace {

uint64_t RandomU64() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

}  // namespace

Result<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options) {
  DISPATCH_RETURN_IF_ERROR(ValidateCoordinatorOptions(options));
  std::mt19937_64 rng(options.seed != 0 ? options.seed : RandomU64());
  uint64_t id = options.coordinator_id;
  while (id == 0) id = rng();
  std::unique_ptr<Coordinator> coordinator(new Coordinator(std::move(options), id));
  DISPATCH_RETURN_IF_ERROR(coordinator->Start());
  uint32_t timeout_ms = coordinator->options_.connect_timeout_ms;
  Result<bool> opened = coordinator->RunOnLoop<bool>([timeout_ms](Loop& loop) {
    return loop.io()
        .timer()
        .timeoutAfter(timeout_ms * kj::MILLISECONDS, loop.session().WhenOpen())
        .then([]() { return true; });
  });
  if (!opened.ok()) {
    std::string why = coordinator->status().last_error;
    Status status = opened.status();
    if (status.code() != StatusCode::kUnauthenticated &&
        status.code() != StatusCode::kInvalidArgument) {
      status = UnavailableError(
          "no coordinator session opened at " + coordinator->options_.dispatcher_address +
          " within " + std::to_string(timeout_ms) + " ms" + (why.empty() ? "" : ": " + why));
    }
    return status;
  }
  return coordinator;
}

Coordinator::Coordinator(CoordinatorOptions options, uint64_t coordinator_id)
    : options_(std::move(options)), coordinator_id_(coordinator_id) {
  // Request ids must not repeat across processes that open the same
  // coordinator id (the dispatcher dedups by them): they start at random
  // even with a fixed seed, or a second process would be handed the first
  // one's closures.
  uint64_t first = RandomU64() >> 1;  // room to count up without wrapping
  if (first == 0) first = 1;
  book_ = std::make_shared<ClosureBook>(options_.max_unacknowledged, first);
}

Coordinator::~Coordinator() { Close(); }

Status Coordinator::Start() {
  std::unique_lock<std::mutex> lock(mu_);
  thread_ = std::thread([this] { ThreadMain(); });
  started_cv_.wait(lock, [this] { return started_; });
  return start_status_;
}

void Coordinator::Close() {
  // Results fetched since the last awaitResults would otherwise stay held
  // at the dispatcher for good. Best effort, briefly.
  (void)RunOnLoop<bool>([](Loop& loop) {
    return loop.io().timer().timeoutAfter(2 * kj::SECONDS, loop.session().ReleaseNow()).then([]() {
      return true;
    });
  });
  book_->Close();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    KJ_REQUIRE(std::this_thread::get_id() != thread_.get_id(),
               "Coordinator::Close() called on the coordinator's own thread");
    stop_requested_ = true;
    if (wake_ != nullptr) uv_async_send(wake_);
  }
  thread_.join();
}

CoordinatorStatus Coordinator::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

bool Coordinator::Post(std::function<void()> function) {
  std::lock_guard<std::mutex> lock(mu_);
  if (wake_ == nullptr || stop_requested_) return false;
  commands_.push_back(std::move(function));
  uv_async_send(wake_);
  return true;
}

void Coordinator::OnWake(uv_async_t* handle) {
  if (auto* self = static_cast<Coordinator*>(handle->data)) self->DrainCommands();
}

void Coordinator::DrainCommands() {
  std::vector<std::function<void()>> commands;
  bool stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands.swap(commands_);
    stop = stop_requested_;
  }
  for (auto& command : commands) {
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { command(); })) {
      Log(LogLevel::kWarning, "coordinator: a posted function failed: ", e->getDescription());
    }
  }
  if (stop && loop_ != nullptr) loop_->io().Stop();
}

void Coordinator::RequestFlush() {
  if (flush_posted_.exchange(true)) return;  // one is on its way and will see ours
  Post([this]() {
    flush_posted_ = false;
    if (loop_ != nullptr) loop_->session().Flush();
  });
}

void Coordinator::ThreadMain() {
  uvkj::UvLoop uv_loop;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 uvkj::UvAsyncIo io(uv_loop.get());
                 {
                   Loop loop(io, options_, coordinator_id_, *book_);
                   loop.session().SetListener([this](const CoordinatorStatus& s) {
                     std::lock_guard<std::mutex> lock(mu_);
                     status_ = s;
                   });
                   auto* wake = new uv_async_t;
                   uvkj::CheckUv(uv_async_init(uv_loop.get(), wake, &Coordinator::OnWake),
                                 "uv_async_init");
                   wake->data = this;
                   loop_ = &loop;
                   {
                     std::lock_guard<std::mutex> lock(mu_);
                     wake_ = wake;
                     started_ = true;
                     start_status_ = Status::Ok();
                     started_cv_.notify_all();
                   }
                   kj::Promise<void> run =
                       loop.session().Run().eagerlyEvaluate([](kj::Exception&& e) {
                         Log(LogLevel::kError,
                             "coordinator: the session loop ended: ", e.getDescription());
                       });
                   DrainCommands();  // a Close() that came before wake_ existed
                   if (!stop_requested_) io.Run();
                   {
                     std::lock_guard<std::mutex> lock(mu_);
                     wake_ = nullptr;
                     commands_.clear();  // their replies answer Unavailable
                   }
                   loop_ = nullptr;
                   uvkj::CloseAndDelete(wake);
                   run = nullptr;
                 }
                 io.wait_scope().poll();
               })) {
    Log(LogLevel::kError, "coordinator thread failed: ", e->getDescription());
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) {
      start_status_ = InternalError(std::string("coordinator: ") + e->getDescription().cStr());
    }
    started_ = true;
    started_cv_.notify_all();
  }
  uv_loop.Close();
}

Result<Coordinator::JoinReply> Coordinator::CallJoin(bool wait) {
  return RunOnLoop<JoinReply>([wait](Loop& loop) {
    return loop.session().Call<JoinReply>([wait](rpc::Coordinator::Client coordinator) {
      auto request = coordinator.joinRequest();
      request.setWait(wait);
      return request.send().then([](capnp::Response<rpc::Coordinator::JoinResults> r) {
        JoinReply reply;
        reply.done = r.getDone();
        auto error = r.getError();
        reply.error_closure_id = error.getClosureId();
        reply.error_message = kj::str(error.getMessage());
        return reply;
      });
    });
  });
}

Status Coordinator::CheckFirstError() {
  Result<JoinReply> reply = CallJoin(false);
  if (!reply.ok()) return reply.status();
  return reply->error();
}

Status Coordinator::JoinReply::error() const {
  if (error_closure_id == 0) return Status::Ok();
  return ClosureFailedError(error_closure_id, error_message.cStr());
}

Result<RemoteValue> Coordinator::Schedule(std::string function, std::string args,
                                          std::vector<ResourceId> resources) {
  if (function.empty()) return InvalidArgumentError("a closure needs a function name");
  const uint64_t bytes = ClosureBook::ClosureBytes(function, args, resources.size());
  if (bytes > options_.max_closure_bytes) {
    return ResourceExhaustedError("a closure of " + std::to_string(bytes) +
                                  " bytes (function, args, resources) is over the limit of " +
                                  std::to_string(options_.max_closure_bytes) +
                                  " (CoordinatorOptions.max_closure_bytes): the dispatcher "
                                  "journals each closure within one 16 MiB record");
  }
  DISPATCH_RETURN_IF_ERROR(book_->TakeError());
  if (book_->TakeFailureHint()) DISPATCH_RETURN_IF_ERROR(CheckFirstError());
  Result<std::shared_ptr<ClosureCell>> cell =
      book_->Add(std::move(function), std::move(args), std::move(resources));
  if (!cell.ok()) return cell.status();
  RequestFlush();
  return RemoteValue(book_, std::move(cell).value());
}

Status Coordinator::Join() {
  while (true) {
    DISPATCH_RETURN_IF_ERROR(book_->TakeError());
    book_->WaitAcknowledged();
    DISPATCH_RETURN_IF_ERROR(book_->TakeError());
    book_->TakeFailureHint();  // join returns the dispatcher's error anyway
    Result<JoinReply> reply = CallJoin(true);
    if (!reply.ok()) return reply.status();
    DISPATCH_RETURN_IF_ERROR(reply->error());
    // Not done without an error: a Schedule on another thread took the
    // error between our calls, or closures came in meanwhile. Wait again.
    if (reply->done && book_->unacknowledged() == 0) return Status::Ok();
  }
}

Result<bool> Coordinator::Done() {
  DISPATCH_RETURN_IF_ERROR(book_->TakeError());
  book_->TakeFailureHint();
  Result<JoinReply> reply = CallJoin(false);
  if (!reply.ok()) return reply.status();
  DISPATCH_RETURN_IF_ERROR(reply->error());
  return reply->done && book_->unacknowledged() == 0;
}

Result<ResourceId> Coordinator::CreatePerWorkerResource(std::string function, std::string args) {
  if (function.empty()) return InvalidArgumentError("a per-worker resource needs a function name");
  // One key for every try: a retry after a lost reply gets the same resource.
  const uint64_t request_id = book_->NextRequestId();
  return RunOnLoop<ResourceId>([function, args, request_id](Loop& loop) {
    return loop.session().Call<ResourceId>([function, args,
                                            request_id](rpc::Coordinator::Client coordinator) {
      auto request = coordinator.createPerWorkerResourceRequest();
      request.setRequestId(request_id);
      request.setFunction(function);
      request.setArgs(kj::arrayPtr(reinterpret_cast<const kj::byte*>(args.data()), args.size()));
      return request.send().then(
          [](capnp::Response<rpc::Coordinator::CreatePerWorkerResourceResults> r) {
            return ResourceId{r.getResourceId()};
          });
    });
  });
}

RemoteValue Coordinator::Attach(uint64_t closure_id) {
  bool lookup = false;
  std::shared_ptr<ClosureCell> cell = book_->Attach(closure_id, &lookup);
  if (lookup) {
    // Whether the dispatcher knows it at all; its outcome, if any, also
    // arrives through the results session.
    std::shared_ptr<ClosureBook> book = book_;
    Post([this, book, closure_id]() {
      loop_->tasks().add(loop_->session()
                             .Call<bool>([book, closure_id](rpc::Coordinator::Client coordinator) {
                               auto request = coordinator.getOutcomesRequest();
                               request.initClosureIds(1).set(0, closure_id);
                               return request.send().then(
                                   [book](capnp::Response<rpc::Coordinator::GetOutcomesResults> r) {
                                     book->OnOutcomes(r.getOutcomes());
                                     return true;
                                   });
                             })
                             .then([](bool) {},
                                   [book, closure_id](kj::Exception&& e) {
                                     Status status = StatusFromException(e);
                                     if (status.code() == StatusCode::kNotFound) {
                                       book->OnUnknown(closure_id, status);
                                     }
                                   }));
    });
  }
  return RemoteValue(book_, std::move(cell));
}

}  // namespace dispatch::clients
