#include "clients/worker_agent.h"

#include <kj/debug.h>
#include <kj/vector.h>

#include <random>

#include "clients/agent_link.h"
#include "clients/closure_runner.h"
#include "clients/task_table.h"
#include "clients/worker_control_server.h"
#include "common/address.h"
#include "common/log.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"

namespace dispatch::clients {

Status ValidateWorkerAgentOptions(const WorkerAgentOptions& o) {
  Result<std::string> address = ToKjAddress(o.dispatcher_address);
  if (!address.ok())
    return InvalidArgumentError("dispatcher address: " + address.status().message());
  if (o.worker_address.empty()) return InvalidArgumentError("the worker address is empty");
  if (o.heartbeat_interval_ms == 0) return InvalidArgumentError("heartbeat interval must be > 0");
  if (o.backoff_initial_ms == 0 || o.backoff_initial_ms > o.backoff_max_ms) {
    return InvalidArgumentError("backoff bounds must satisfy 0 < initial <= max");
  }
  if (o.connect_timeout_ms == 0) return InvalidArgumentError("connect timeout must be > 0");
  return Status::Ok();
}

// Everything that lives on the agent thread, in construction order.
class WorkerAgent::Runner final : public AgentEnvironment {
 public:
  Runner(uvkj::UvAsyncIo& io, const WorkerAgentOptions& options, TaskHandlerFactory& factory,
         const FunctionRegistry& functions, StatusBoard& board, uint64_t worker_incarnation,
         kj::Own<kj::PromiseFulfiller<void>> stop)
      : io_(io),
        options_(options),
        table_(io.timer(), factory, board, options.split_batch, options.first_split_sequence),
        closures_(io.loop(), options, functions, board),
        link_(io.timer(), io.network(), options, worker_incarnation, table_,
              MakeControl(table_, closures_, board, &server_), board),
        stop_(kj::mv(stop)) {
    table_.set_link(&link_);
    closures_.set_link(&link_);
  }

  ~Runner() noexcept(false) {
    services_.clear();  // before the tasks they may look at
    table_.StopAll();
    server_->Detach();  // the dispatcher may hold the capability a while longer
  }

  AgentLink& link() { return link_; }
  void RequestStop() { stop_->fulfill(); }
  void StartService(AgentService& service) {
    services_.add(kj::evalLater([this, &service]() {
                    return service.Run(*this);
                  }).eagerlyEvaluate([](kj::Exception&& e) {
      Log(LogLevel::kWarning, "worker agent: a service failed: ", e.getDescription());
    }));
  }

  // AgentEnvironment
  kj::Network& network() override { return io_.network(); }
  kj::LowLevelAsyncIoProvider& low_level() override { return io_.low_level(); }
  kj::Timer& timer() override { return io_.timer(); }
  const WorkerAgentOptions& options() override { return options_; }
  kj::Maybe<TaskHandler&> FindTask(uint64_t task_id) override {
    return table_.FindHandler(task_id);
  }

 private:
  static rpc::WorkerControl::Client MakeControl(TaskTable& table, ClosureRunner& closures,
                                                StatusBoard& board, WorkerControlServer** out) {
    auto server = kj::heap<WorkerControlServer>(table, closures, board);
    *out = server.get();
    return kj::mv(server);
  }

  uvkj::UvAsyncIo& io_;
  const WorkerAgentOptions& options_;
  TaskTable table_;
  ClosureRunner closures_;                 // before the link, which reports for it
  WorkerControlServer* server_ = nullptr;  // owned by the capability's refcount
  AgentLink link_;
  kj::Own<kj::PromiseFulfiller<void>> stop_;
  kj::Vector<kj::Promise<void>> services_;  // declared last: cancelled first
};

WorkerAgent::WorkerAgent(WorkerAgentOptions options, std::unique_ptr<TaskHandlerFactory> factory)
    : options_(std::move(options)), factory_(std::move(factory)) {}

WorkerAgent::~WorkerAgent() { Stop(); }

Status WorkerAgent::Start() {
  DISPATCH_RETURN_IF_ERROR(ValidateWorkerAgentOptions(options_));
  if (factory_ == nullptr) return InvalidArgumentError("no task handler factory");
  std::unique_lock<std::mutex> lock(mu_);
  // An agent runs once: Start() after Stop() is refused too.
  if (started_ || thread_.joinable()) {
    return FailedPreconditionError("the worker agent was already started");
  }
  thread_ = std::thread([this] { ThreadMain(); });
  started_cv_.wait(lock, [this] { return started_; });
  return start_status_;
}

void WorkerAgent::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    KJ_REQUIRE(std::this_thread::get_id() != thread_.get_id(),
               "WorkerAgent::Stop() called on the agent thread (from a handler or Post()); it "
               "would wait for itself");
    stop_requested_ = true;
    if (wake_ != nullptr) uv_async_send(wake_);
  }
  thread_.join();
}

Status WorkerAgent::RegisterFunction(std::string name, ClosureFunction function,
                                     ClosureFunctionOptions function_options) {
  if (name.empty()) return InvalidArgumentError("a closure function needs a name");
  if (!function) return InvalidArgumentError("closure function " + name + " is empty");
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ || thread_.joinable()) {
    return FailedPreconditionError("closure function " + name +
                                   " registered after the worker agent started");
  }
  if (functions_.count(name) > 0) {
    return AlreadyExistsError("closure function " + name + " is already registered");
  }
  options_.functions.push_back(name);
  functions_.emplace(std::move(name), RegisteredFunction{std::move(function), function_options});
  return Status::Ok();
}

void WorkerAgent::HeartbeatNow() {
  Post([this] {
    if (runner_ != nullptr) runner_->link().HeartbeatNow();
  });
}

bool WorkerAgent::Post(std::function<void()> function) {
  std::lock_guard<std::mutex> lock(mu_);
  if (wake_ == nullptr || stop_requested_) return false;
  commands_.push_back(std::move(function));
  uv_async_send(wake_);  // the one libuv call that is safe from any thread
  return true;
}

void WorkerAgent::OnWake(uv_async_t* handle) {
  if (auto* self = static_cast<WorkerAgent*>(handle->data)) self->DrainCommands();
}

void WorkerAgent::DrainCommands() {
  std::vector<std::function<void()>> commands;
  bool stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands.swap(commands_);
    stop = stop_requested_;
  }
  for (auto& command : commands) {
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { command(); })) {
      Log(LogLevel::kWarning, "worker agent: a posted function failed: ", e->getDescription());
    }
  }
  if (stop && runner_ != nullptr) runner_->RequestStop();
}

void WorkerAgent::ThreadMain() {
  uint64_t seed = options_.seed != 0 ? options_.seed : std::random_device{}();
  std::mt19937_64 rng(seed);
  uint64_t worker_incarnation = rng() | 1;  // never 0
  board_.Update([&](WorkerAgentStatus& s) {
    s = WorkerAgentStatus();
    s.running = true;
    s.worker_incarnation = worker_incarnation;
  });

  uvkj::UvLoop loop;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() {
                 uvkj::UvAsyncIo io(loop.get());
                 {
                   auto stop = kj::newPromiseAndFulfiller<void>();
                   Runner runner(io, options_, *factory_, functions_, board_, worker_incarnation,
                                 kj::mv(stop.fulfiller));
                   // Referenced (unlike the bridge's own async handle): it keeps the loop
                   // alive until Stop(), whatever else is pending.
                   auto* wake = new uv_async_t;
                   uvkj::CheckUv(uv_async_init(loop.get(), wake, &WorkerAgent::OnWake),
                                 "uv_async_init");
                   wake->data = this;
                   runner_ = &runner;
                   {
                     std::lock_guard<std::mutex> lock(mu_);
                     wake_ = wake;
                     started_ = true;
                     start_status_ = Status::Ok();
                     started_cv_.notify_all();
                   }
                   // A Stop() that came before wake_ existed is seen here.
                   DrainCommands();
                   for (auto& service : services_) runner.StartService(*service);
                   kj::Promise<void> run =
                       runner.link().Run().eagerlyEvaluate([](kj::Exception&& e) {
                         Log(LogLevel::kError,
                             "worker agent: the link ended: ", e.getDescription());
                       });
                   stop.promise.wait(io.wait_scope());
                   {
                     std::lock_guard<std::mutex> lock(mu_);
                     wake_ = nullptr;
                     commands_.clear();
                   }
                   runner_ = nullptr;
                   uvkj::CloseAndDelete(wake);
                   run = nullptr;
                 }
                 io.wait_scope().poll();
               })) {
    Log(LogLevel::kError, "worker agent thread failed: ", e->getDescription());
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_)
      start_status_ = InternalError(std::string("worker agent: ") + e->getDescription().cStr());
    started_ = true;
    started_cv_.notify_all();
  }
  loop.Close();
  board_.Update([](WorkerAgentStatus& s) {
    s.running = false;
    s.connected = false;
    s.registered = false;
    s.tasks.clear();
  });
}

}  // namespace dispatch::clients
