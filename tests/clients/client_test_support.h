// Helpers for the client tests: the dispatch-worker binary as a child
// process, dispatchctl runs with their output, a recording TaskHandlerFactory
// for in-process WorkerAgents. Seeds come from tests/support/test_seed.h.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "clients/dataset_client.h"
#include "clients/job_client.h"
#include "clients/task_handler.h"
#include "clients/worker_agent.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_seed.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {

// Specs without designated initializers (which -Wextra flags when partial).
clients::DatasetSpec DatasetOf(std::string definition, uint64_t num_splits = 0);
clients::JobOptions JobOf(uint64_t dataset_id,
                          rpc::ProcessingMode mode = rpc::ProcessingMode::OFF,
                          std::string name = "", int64_t name_index = 0);

const char* DispatchWorkerBinary();
const char* DispatchctlBinary();

// A dispatcher that can be killed (-9) or stopped and started again on the
// same work dir and address.
class RestartableDispatcher {
 public:
  RestartableDispatcher();
  const std::string& address() const { return address_; }
  DispatcherProcess& process() { return *process_; }
  void Kill9();
  void StopGracefully();
  void Start();

 private:
  TempDir dir_;
  std::string work_dir_;
  std::string address_;
  std::unique_ptr<DispatcherProcess> process_;
};

// Where a test's dispatch-worker listens unless it says otherwise: a port the
// kernel picks, so suites on one machine never collide.
inline constexpr char kFreeLoopbackPort[] = "tcp:127.0.0.1:0";

// `dispatch-worker` started against a dispatcher, ready once it printed its
// start line ("dispatch-worker ADDRESS started"), which names the address it
// listens on and registers as: with port 0, the one the kernel picked.
class WorkerProcess {
 public:
  WorkerProcess(const std::string& dispatcher, std::vector<std::string> extra_flags = {},
                const std::string& address = kFreeLoopbackPort);
  // Waits for the next "registered as worker N" line; returns N (0 on timeout).
  uint64_t WaitRegistered(std::chrono::milliseconds timeout = kTestDeadline);
  // SIGKILL, reaped. A Unix socket the dead worker listened on stays behind
  // (only the dispatcher removes a stale one); it is removed here, so a new
  // process can take over the address, as an orchestrator would.
  void Kill9();
  Subprocess& process() { return *process_; }
  // The bound address: never port 0.
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  std::unique_ptr<Subprocess> process_;
};

struct CommandResult {
  int exit_code = -1;  // -1: did not exit normally (or timed out)
  std::string output;  // stdout and stderr, interleaved
};
// Runs dispatchctl with `args` to completion.
CommandResult RunDispatchctl(const std::vector<std::string>& args);

// Task handlers that record what they saw. DYNAMIC tasks read every split and
// complete; other tasks run until deleted. Thread-safe to inspect.
class RecordingFactory final : public clients::TaskHandlerFactory {
 public:
  struct Record {
    std::set<uint64_t> started;
    std::set<uint64_t> deleted;
    std::set<uint64_t> completed;
    std::multiset<uint64_t> splits;   // split indices handed to this worker
    std::vector<uint64_t> sequences;  // getSplit sequence numbers in the order answered
  };
  RecordingFactory() : state_(std::make_shared<State>()) {}
  kj::Own<clients::TaskHandler> CreateHandler(const clients::TaskDescription& task) override;
  struct State {
    std::mutex mu;
    std::condition_variable changed;
    Record record;
    Record Snapshot();
    // Waits (woken by every change) until `condition` holds or `timeout`.
    bool WaitFor(const std::function<bool(const Record&)>& condition,
                 std::chrono::milliseconds timeout = kTestDeadline);
  };
  // The records, shared with the handlers (the agent owns the factory).
  std::shared_ptr<State> state() const { return state_; }

 private:
  std::shared_ptr<State> state_;
};

// A WorkerAgent with a RecordingFactory, for in-process tests. It serves no
// transfer address, so its worker address is only its identity: a `name`
// such as "agent-a", not an address anyone could connect to.
struct TestAgent {
  TestAgent(const std::string& dispatcher, const std::string& name, uint64_t seed,
            uint32_t heartbeat_ms = 100);
  std::shared_ptr<RecordingFactory::State> records;
  std::unique_ptr<clients::WorkerAgent> agent;
};

}  // namespace dispatch::testing
