#include "clients/coordinator.h"

#include <kj/debug.h>

#include <random>

#include "clients/dispatcher_addresses.h"
#include "common/address.h"
#include "common/closure_trace.h"
#include "common/log.h"
#include "common/rpc_status.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::clients {

Status ValidateCoordinatorOptions(const CoordinatorOptions& o) {
  Result<std::vector<std::string>> addresses = ParseDispatcherAddressList(o.dispatcher_address);
  if (!addresses.ok())
    return InvalidArgumentError("dispatcher address: " + addresses.status().message());
  if (o.max_schedule_batch == 0) return InvalidArgumentError("max_schedule_batch must be > 0");
  if (o.max_schedule_calls_in_flight == 0) {
    return InvalidArgumentError("max_schedule_calls_in_flight must be > 0");
  }
  if (o.max_unacknowledged == 0) return InvalidArgumentError("max_unacknowledged must be > 0");
  if (o.max_remembered_releases == 0)
    return InvalidArgumentError("max_remembered_releases must be > 0");
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
class Coordinator::Loop final : public LoopThread::Body, public kj::TaskSet::ErrorHandler {
 public:
  Loop(uvkj::UvAsyncIo& io, const CoordinatorOptions& options, uint64_t coordinator_id,
       ClosureBook& book)
      : io_(io), session_(io.timer(), io.network(), options, coordinator_id, book), tasks_(*this) {}

  // Opens the session and keeps it open until the Loop goes.
  void Run() {
    run_ = session_.Run().eagerlyEvaluate([](kj::Exception&& e) {
      Log(LogLevel::kError, "coordinator: the session loop ended: ", e.getDescription());
    });
  }

  uvkj::UvAsyncIo& io() { return io_; }
  CoordinatorSession& session() { return session_; }
  kj::TaskSet& tasks() { return tasks_; }
  void taskFailed(kj::Exception&& e) override {
    Log(LogLevel::kWarning, "coordinator: ", e.getDescription());
  }

 private:
  uvkj::UvAsyncIo& io_;
  CoordinatorSession session_;
  kj::TaskSet tasks_;
  kj::Promise<void> run_ = nullptr;  // declared last: cancelled first
};

// Holds the Coordinator for RemoteValue::Cancel() until Close(), which waits
// for a cancel in progress (bounded by connect_timeout_ms).
class Coordinator::Canceller final : public ClosureCanceller {
 public:
  explicit Canceller(Coordinator* owner) : owner_(owner) {}
  Result<RemoteValueStatus> CancelOne(uint64_t closure_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (owner_ == nullptr) return UnavailableError("the coordinator is closed");
    Result<std::vector<RemoteValueStatus>> after = owner_->Cancel({closure_id});
    if (!after.ok()) return after.status();
    if (after->size() != 1) return InternalError("the dispatcher's cancel reply has no state");
    return after->front();
  }
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    owner_ = nullptr;
  }

 private:
  std::mutex mu_;
  Coordinator* owner_;
};

template <typename T>
Result<T> Coordinator::RunOnLoop(std::function<kj::Promise<T>(Loop&)> start) {
  return loop_thread_.RunAndWait<T>([this, start = std::move(start)]() { return start(*loop_); });
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
  book_ = std::make_shared<ClosureBook>(options_.max_unacknowledged, first,
                                        options_.max_remembered_releases);
  canceller_ = std::make_shared<Canceller>(this);
  book_->SetCanceller(canceller_);
}

Coordinator::~Coordinator() { Close(); }

Status Coordinator::Start() {
  return loop_thread_.Start([this](uvkj::UvAsyncIo& io) -> kj::Own<LoopThread::Body> {
    auto loop = kj::heap<Loop>(io, options_, coordinator_id_, *book_);
    loop->session().SetListener([this](const CoordinatorStatus& s) {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = s;
    });
    loop->Run();
    loop_ = loop.get();
    return loop;
  });
}

void Coordinator::Close() {
  KJ_REQUIRE(!loop_thread_.OnLoopThread(),
             "Coordinator::Close() called on the coordinator's own thread");
  canceller_->Detach();  // RemoteValue::Cancel() is Unavailable from now on
  // Results fetched since the last awaitResults would otherwise stay held
  // at the dispatcher for good. Best effort, briefly.
  (void)RunOnLoop<bool>([](Loop& loop) {
    return loop.io().timer().timeoutAfter(2 * kj::SECONDS, loop.session().ReleaseNow()).then([]() {
      return true;
    });
  });
  book_->Close();
  loop_thread_.Stop();
}

CoordinatorStatus Coordinator::status() const {
  ClosureBook::Counters counters = book_->counters();
  std::lock_guard<std::mutex> lock(mu_);
  CoordinatorStatus status = status_;
  status.duplicate_outcomes_dropped = counters.duplicate_outcomes_dropped;
  status.releases_remembered = counters.releases_remembered;
  status.releases_forgotten = counters.releases_forgotten;
  return status;
}

void Coordinator::RequestFlush() {
  if (flush_posted_.exchange(true)) return;  // one is on its way and will see ours
  loop_thread_.Post([this]() {
    flush_posted_ = false;
    loop_->session().Flush();
  });
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
                                          ScheduleOptions options) {
  const uint64_t trace_scheduled_ns = options.trace ? TraceNowNanos() : 0;
  std::vector<ResourceId> resources = std::move(options.resources);
  if (function.empty()) return InvalidArgumentError("a closure needs a function name");
  const int64_t timeout_ms = options.timeout.count();
  if (timeout_ms < 0 || timeout_ms > int64_t{UINT32_MAX}) {
    return InvalidArgumentError("a closure timeout of " + std::to_string(timeout_ms) +
                                " ms is outside 0 (none) .. " + std::to_string(UINT32_MAX) + " ms");
  }
  std::vector<std::shared_ptr<ClosureCell>> inputs;
  inputs.reserve(options.inputs.size());
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    const RemoteValue& input = options.inputs[i];
    if (input.cell_ == nullptr || input.book_ != book_) {
      return InvalidArgumentError("input " + std::to_string(i) +
                                  " is not a closure of this coordinator");
    }
    inputs.push_back(input.cell_);
  }
  const uint64_t bytes =
      ClosureBook::ClosureBytes(function, args, resources.size(), inputs.size());
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
      book_->Add(std::move(function), std::move(args), std::move(resources), options.priority,
                 static_cast<uint32_t>(timeout_ms), std::move(inputs), trace_scheduled_ns);
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
    if (reply->done && book_->unacknowledged() == 0) {
      book_->WaitHeldOutcomes();
      return book_->TakeError();
    }
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
    loop_thread_.Post([this, book, closure_id]() {
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

Result<std::vector<RemoteValueStatus>> Coordinator::Cancel(
    const std::vector<uint64_t>& closure_ids) {
  std::vector<RemoteValueStatus> out;
  out.reserve(closure_ids.size());
  const size_t per_call = options_.max_schedule_batch;
  const uint32_t timeout_ms = options_.connect_timeout_ms;
  for (size_t begin = 0; begin < closure_ids.size(); begin += per_call) {
    std::vector<uint64_t> ids(
        closure_ids.begin() + static_cast<long>(begin),
        closure_ids.begin() + static_cast<long>(std::min(closure_ids.size(), begin + per_call)));
    using States = std::vector<RemoteValueStatus>;
    Result<States> states = RunOnLoop<States>([ids, timeout_ms](Loop& loop) {
      // Bounded: a dispatcher gone for good must not hold the caller (or
      // Close(), which waits for a RemoteValue::Cancel()) forever.
      return loop.io().timer().timeoutAfter(
          timeout_ms * kj::MILLISECONDS,
          loop.session().Call<States>([ids](rpc::Coordinator::Client coordinator) {
            auto request = coordinator.cancelRequest();
            auto list = request.initClosureIds(static_cast<unsigned>(ids.size()));
            for (unsigned i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
            return request.send().then([](capnp::Response<rpc::Coordinator::CancelResults> r) {
              States states;
              for (auto state : r.getStates()) {
                states.push_back(state == rpc::ClosureState::FINISHED ? RemoteValueStatus::kReady
                                 : state == rpc::ClosureState::FAILED
                                     ? RemoteValueStatus::kFailed
                                     : RemoteValueStatus::kCancelled);
              }
              return states;
            });
          }));
    });
    if (!states.ok()) return states.status();
    out.insert(out.end(), states->begin(), states->end());
  }
  return out;
}

}  // namespace dispatch::clients
