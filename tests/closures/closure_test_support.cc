#include "tests/closures/closure_test_support.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <stdexcept>

#include "tests/integration/client_loop.h"

namespace dispatch::testing {

std::string MaxQueuedClosuresFlag(uint64_t n) {
  return "--max-queued-closures=" + std::to_string(n);
}
std::string MaxClosureAttemptsFlag(uint64_t n) {
  return "--max-closure-attempts=" + std::to_string(n);
}
std::string TransientLimitFlag(uint64_t n) {
  return "--closure-transient-retries=" + std::to_string(n);
}

// A Unix socket, not a TCP port: a restart after kill -9 gets the same
// address back for sure, while a freed TCP port from the ephemeral range can
// be taken meanwhile by any process's outgoing connection.
ClosureDispatcher::ClosureDispatcher(std::vector<std::string> flags)
    : flags_(std::move(flags)),
      work_dir_(dir_.File("work")),
      address_("unix:" + dir_.File("dispatcher.sock")) {
  Start();
}

void ClosureDispatcher::Kill9() {
  process_->process().Signal(SIGKILL);
  if (!process_->process().Wait(kTestDeadline).has_value()) {
    throw std::runtime_error("the dispatcher did not die of SIGKILL");
  }
  process_.reset();
}

void ClosureDispatcher::Start() {
  DispatcherProcess::Options options;
  options.listen = address_;
  options.work_dir = work_dir_;
  options.extra_flags = flags_;
  // Workers are asked to heartbeat often, so a lost one is noticed fast.
  options.extra_flags.push_back("--worker-heartbeat-interval-ms=100");
  process_ = std::make_unique<DispatcherProcess>(options);
  address_ = process_->address();
}

std::unique_ptr<WorkerProcess> StartClosureWorker(const std::string& dispatcher, uint32_t slots,
                                                  const std::string& address) {
  auto worker = std::make_unique<WorkerProcess>(
      dispatcher, std::vector<std::string>{"--max-closures=" + std::to_string(slots)}, address);
  if (worker->WaitRegistered() == 0) {
    throw std::runtime_error("dispatch-worker " + worker->address() + " did not register");
  }
  return worker;
}

std::unique_ptr<clients::WorkerAgent> MakeAgent(const std::string& dispatcher,
                                                const std::string& name, uint32_t slots) {
  clients::WorkerAgentOptions options;
  options.dispatcher_address = dispatcher;
  options.worker_address = name;
  options.heartbeat_interval_ms = 50;
  options.backoff_initial_ms = 20;
  options.backoff_max_ms = 200;
  options.seed = TestSeed();
  options.max_closures = slots;
  return std::make_unique<clients::WorkerAgent>(options, std::make_unique<RecordingFactory>());
}

clients::CoordinatorOptions CoordinatorOf(const std::string& dispatcher, uint64_t id) {
  clients::CoordinatorOptions options;
  options.dispatcher_address = dispatcher;
  options.coordinator_id = id;
  options.backoff_initial_ms = 20;
  options.backoff_max_ms = 200;
  return options;
}

std::unique_ptr<clients::Coordinator> MakeCoordinator(clients::CoordinatorOptions options) {
  auto coordinator = clients::Coordinator::Create(std::move(options));
  if (!coordinator.ok()) {
    throw std::runtime_error("Coordinator::Create: " + coordinator.status().ToString());
  }
  return std::move(coordinator).value();
}

std::unique_ptr<clients::Coordinator> MakeCoordinator(const std::string& dispatcher, uint64_t id) {
  return MakeCoordinator(CoordinatorOf(dispatcher, id));
}

ClosureCounters GetClosureCounters(const std::string& dispatcher) {
  ClientLoop loop;
  auto connection = loop.Connect(dispatcher);
  auto reply = loop.Wait(connection->dispatcher().getClosureStatsRequest().send());
  auto s = reply.getStats();
  ClosureCounters c;
  c.queued = s.getQueued();
  c.assigned = s.getAssigned();
  c.finished = s.getFinished();
  c.failed = s.getFailed();
  c.cancelled = s.getCancelled();
  c.scheduled_total = s.getScheduledTotal();
  c.results_accepted = s.getResultsAccepted();
  c.reports_ignored = s.getReportsIgnored();
  c.put_back = s.getPutBack();
  c.transient_retries = s.getTransientRetries();
  c.attempts_exhausted = s.getAttemptsExhausted();
  c.released_total = s.getReleasedTotal();
  c.schedule_waits = s.getScheduleWaits();
  c.queued_without_worker = s.getQueuedWithoutWorker();
  c.cancel_requested = s.getCancelRequested();
  c.cancelled_running = s.getCancelledRunning();
  c.deadlines_exceeded = s.getDeadlinesExceeded();
  c.late_reports_ignored = s.getLateReportsIgnored();
  c.waiting = s.getWaiting();
  c.input_bytes_pushed = s.getInputBytesPushed();
  c.inputs_over_limit = s.getInputsOverLimit();
  c.results_read = s.getResultsRead();
  c.results_read_off_loop = s.getResultsReadOffLoop();
  c.results_damaged = s.getResultsDamaged();
  return c;
}

clients::ScheduleOptions After(std::vector<clients::RemoteValue> inputs) {
  clients::ScheduleOptions options;
  options.inputs = std::move(inputs);
  return options;
}

bool WaitForCounters(const std::string& dispatcher,
                     const std::function<bool(const ClosureCounters&)>& condition,
                     std::chrono::milliseconds deadline) {
  return WaitUntil([&] { return condition(GetClosureCounters(dispatcher)); }, deadline);
}

std::string FetchOrDie(const clients::RemoteValue& value) {
  Result<std::string> result = value.FetchFor(kFetchDeadline);
  EXPECT_TRUE(result.ok()) << "closure " << value.closure_id() << ": "
                           << result.status().ToString();
  return result.ok() ? *result : "<" + result.status().ToString() + ">";
}

}  // namespace dispatch::testing
