// Helpers for the closure tests: a dispatcher that can be killed -9 and
// restarted on the same address and work dir with closure flags,
// dispatch-worker processes with closure slots, Coordinators with fast
// reconnects, and the dispatcher's closure counters. Every wait has a
// deadline (WaitUntil, tests/support/wait_until.h); nothing sleeps to wait.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "clients/coordinator.h"
#include "tests/clients/client_test_support.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {

// How long a Fetch in a test may wait before the test fails.
inline constexpr std::chrono::milliseconds kFetchDeadline{20000};

// The dispatcher's closure flags under test.
std::string MaxQueuedClosuresFlag(uint64_t n);
std::string MaxClosureAttemptsFlag(uint64_t n);
std::string TransientLimitFlag(uint64_t n);

class ClosureDispatcher {
 public:
  explicit ClosureDispatcher(std::vector<std::string> flags = {});
  const std::string& address() const { return address_; }
  DispatcherProcess& process() { return *process_; }
  void Kill9();
  void Start();

 private:
  TempDir dir_;
  std::vector<std::string> flags_;
  std::string work_dir_;
  std::string address_;
  std::unique_ptr<DispatcherProcess> process_;
};

// A dispatch-worker with `slots` closure slots, registered before returning;
// at a free port unless `address` says otherwise (a worker the test restarts
// at its address after WorkerProcess::Kill9 needs a Unix socket).
std::unique_ptr<WorkerProcess> StartClosureWorker(const std::string& dispatcher, uint32_t slots = 1,
                                                  const std::string& address = kFreeLoopbackPort);
// An embedded WorkerAgent (not started) with `slots` closure slots, fast
// heartbeats and reconnects, and a RecordingFactory for tasks. It serves no
// transfer address: `name` is only its identity, nobody connects to it.
std::unique_ptr<clients::WorkerAgent> MakeAgent(const std::string& dispatcher,
                                                const std::string& name, uint32_t slots);

// Schedule options naming `inputs` (ScheduleOptions.inputs).
clients::ScheduleOptions After(std::vector<clients::RemoteValue> inputs);

clients::CoordinatorOptions CoordinatorOf(const std::string& dispatcher, uint64_t id = 0);
std::unique_ptr<clients::Coordinator> MakeCoordinator(const std::string& dispatcher,
                                                      uint64_t id = 0);
std::unique_ptr<clients::Coordinator> MakeCoordinator(clients::CoordinatorOptions options);

// The dispatcher's ClosureStats, fields copied out.
struct ClosureCounters {
  uint64_t queued = 0, assigned = 0, finished = 0, failed = 0, cancelled = 0;
  uint64_t scheduled_total = 0, results_accepted = 0, reports_ignored = 0, put_back = 0;
  uint64_t transient_retries = 0, attempts_exhausted = 0, released_total = 0;
  uint64_t schedule_waits = 0;
  uint64_t queued_without_worker = 0;
  uint64_t cancel_requested = 0, cancelled_running = 0, deadlines_exceeded = 0;
  uint64_t late_reports_ignored = 0;
  uint64_t waiting = 0, input_bytes_pushed = 0, inputs_over_limit = 0;
  uint64_t results_read = 0, results_read_off_loop = 0, results_damaged = 0;
};
ClosureCounters GetClosureCounters(const std::string& dispatcher);
// Polls the counters until `condition` holds or the deadline passes.
bool WaitForCounters(const std::string& dispatcher,
                     const std::function<bool(const ClosureCounters&)>& condition,
                     std::chrono::milliseconds deadline = kTestDeadline);

// Fetches with the test deadline; the result bytes or a test failure message.
std::string FetchOrDie(const clients::RemoteValue& value);

}  // namespace dispatch::testing
