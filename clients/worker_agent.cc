#include "clients/worker_agent.h"

#include <kj/debug.h>
#include <kj/vector.h>

#include <random>

#include "clients/agent_link.h"
#include "clients/closure_runner.h"
#include "clients/task_table.h"
#include "clients/worker_control_server.h"
#include "clients/dispatcher_addresses.h"
#include "common/address.h"
#include "common/log.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::clients {

Status ValidateWorkerAgentOptions(const WorkerAgentOptions& o) {
  Result<std::vector<std::string>> addresses = ParseDispatcherAddressList(o.dispatcher_address);
  if (!addresses.ok())
    return InvalidArgumentError("dispatcher address: " + addresses.status().message());
  if (o.worker_address.empty()) return InvalidArgumentError("the worker address is empty");
  if (o.heartbeat_interval_ms == 0) return InvalidArgumentError("heartbeat interval must be > 0");
  if (o.backoff_initial_ms == 0 || o.backoff_initial_ms > o.backoff_max_ms) {
    return InvalidArgumentError("backoff bounds must satisfy 0 < initial <= max");
  }
  if (o.connect_timeout_ms == 0) return InvalidArgumentError("connect timeout must be > 0");
  return Status::Ok();
}

// Everything that lives on the agent thread, in construction order.
class WorkerAgent::Runner final : public LoopThread::Body, public AgentEnvironment {
 public:
  Runner(uvkj::UvAsyncIo& io, LoopThread& loop_thread, const WorkerAgentOptions& options,
         TaskHandlerFactory& factory, const FunctionRegistry& functions, StatusBoard& board,
         uint64_t worker_incarnation)
      : running_(board, worker_incarnation),
        io_(io),
        options_(options),
        table_(io.timer(), factory, board, options.split_batch, options.first_split_sequence),
        closures_(loop_thread, options, functions, board),
        link_(io.timer(), io.network(), options, worker_incarnation, table_,
              MakeControl(table_, closures_, board, &server_), board) {
    table_.set_link(&link_);
    closures_.set_link(&link_);
  }

  ~Runner() noexcept(false) {
    run_ = nullptr;
    services_.clear();  // before the tasks they may look at
    table_.StopAll();
    server_->Detach();  // the dispatcher may hold the capability a while longer
  }

  AgentLink& link() { return link_; }

  // Starts the services, then the link; both run until the Runner goes.
  void Run(std::vector<std::unique_ptr<AgentService>>& services) {
    for (auto& service : services) StartService(*service);
    run_ = link_.Run().eagerlyEvaluate([](kj::Exception&& e) {
      Log(LogLevel::kError, "worker agent: the link ended: ", e.getDescription());
    });
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
  // Publishes that the agent runs; destroyed last (declared first), once
  // everything else of the agent thread is gone, it publishes that it
  // stopped, also when building the rest failed.
  class RunningMark {
   public:
    RunningMark(StatusBoard& board, uint64_t worker_incarnation) : board_(board) {
      board_.Update([&](WorkerAgentStatus& s) {
        s = WorkerAgentStatus();
        s.running = true;
        s.worker_incarnation = worker_incarnation;
      });
    }
    ~RunningMark() {
      board_.Update([](WorkerAgentStatus& s) {
        s.running = false;
        s.connected = false;
        s.registered = false;
        s.tasks.clear();
      });
    }
    RunningMark(const RunningMark&) = delete;
    RunningMark& operator=(const RunningMark&) = delete;

   private:
    StatusBoard& board_;
  };

  void StartService(AgentService& service) {
    services_.add(kj::evalLater([this, &service]() {
                    return service.Run(*this);
                  }).eagerlyEvaluate([](kj::Exception&& e) {
      Log(LogLevel::kWarning, "worker agent: a service failed: ", e.getDescription());
    }));
  }

  static rpc::WorkerControl::Client MakeControl(TaskTable& table, ClosureRunner& closures,
                                                StatusBoard& board, WorkerControlServer** out) {
    auto server = kj::heap<WorkerControlServer>(table, closures, board);
    *out = server.get();
    return kj::mv(server);
  }

  RunningMark running_;  // declared first: destroyed last
  uvkj::UvAsyncIo& io_;
  const WorkerAgentOptions& options_;
  TaskTable table_;
  ClosureRunner closures_;                 // before the link, which reports for it
  WorkerControlServer* server_ = nullptr;  // owned by the capability's refcount
  AgentLink link_;
  kj::Promise<void> run_ = nullptr;         // the link's run; cancelled first
  kj::Vector<kj::Promise<void>> services_;  // declared last
};

WorkerAgent::WorkerAgent(WorkerAgentOptions options, std::unique_ptr<TaskHandlerFactory> factory)
    : options_(std::move(options)), factory_(std::move(factory)) {}

WorkerAgent::~WorkerAgent() { Stop(); }

Status WorkerAgent::Start() {
  DISPATCH_RETURN_IF_ERROR(ValidateWorkerAgentOptions(options_));
  if (factory_ == nullptr) return InvalidArgumentError("no task handler factory");
  std::lock_guard<std::mutex> lock(mu_);
  // An agent runs once: Start() after Stop() is refused too (FailedPrecondition).
  return loop_thread_.Start([this](uvkj::UvAsyncIo& io) -> kj::Own<LoopThread::Body> {
    uint64_t seed = options_.seed != 0 ? options_.seed : std::random_device{}();
    std::mt19937_64 rng(seed);
    uint64_t worker_incarnation = rng() | 1;  // never 0
    auto runner = kj::heap<Runner>(io, loop_thread_, options_, *factory_, functions_, board_,
                                   worker_incarnation);
    runner->Run(services_);
    runner_ = runner.get();
    return runner;
  });
}

void WorkerAgent::Stop() {
  KJ_REQUIRE(!loop_thread_.OnLoopThread(),
             "WorkerAgent::Stop() called on the agent thread (from a handler or Post()); it "
             "would wait for itself");
  loop_thread_.Stop();
}

Status WorkerAgent::RegisterFunction(std::string name, ClosureFunction function,
                                     ClosureFunctionOptions function_options) {
  if (name.empty()) return InvalidArgumentError("a closure function needs a name");
  if (!function) return InvalidArgumentError("closure function " + name + " is empty");
  std::lock_guard<std::mutex> lock(mu_);
  if (loop_thread_.WasStarted()) {
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
  loop_thread_.Post([this] { runner_->link().HeartbeatNow(); });
}

bool WorkerAgent::Post(std::function<void()> function) {
  return loop_thread_.Post(std::move(function));
}

}  // namespace dispatch::clients
