#include "tests/clients/client_test_support.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>

#include "common/log.h"

namespace dispatch::testing {

clients::DatasetSpec DatasetOf(std::string definition, uint64_t num_splits) {
  clients::DatasetSpec spec;
  spec.definition = std::move(definition);
  spec.num_splits = num_splits;
  return spec;
}

clients::JobOptions JobOf(uint64_t dataset_id, rpc::ProcessingMode mode, std::string name,
                          int64_t name_index) {
  clients::JobOptions options;
  options.dataset_id = dataset_id;
  options.processing_mode = mode;
  options.job_name = std::move(name);
  options.job_name_index = name_index;
  options.heartbeat_interval_ms = 100;
  return options;
}

// A Unix socket, like ClosureDispatcher's: a freed TCP port could be taken by
// another process between the kill and the restart.
RestartableDispatcher::RestartableDispatcher()
    : work_dir_(dir_.File("work")), address_("unix:" + dir_.File("dispatcher.sock")) {
  Start();
}

void RestartableDispatcher::Kill9() {
  process_->process().Signal(SIGKILL);
  ASSERT_TRUE(process_->process().Wait(kTestDeadline).has_value());
  process_.reset();
}

void RestartableDispatcher::StopGracefully() {
  auto status = process_->Terminate(kTestDeadline);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  process_.reset();
}

void RestartableDispatcher::Start() {
  DispatcherProcess::Options options;
  options.listen = address_;
  options.work_dir = work_dir_;
  process_ = std::make_unique<DispatcherProcess>(options);
  address_ = process_->address();
}

const char* DispatchWorkerBinary() { return DISPATCH_WORKER_BINARY; }
const char* DispatchctlBinary() { return DISPATCHCTL_BINARY; }

WorkerProcess::WorkerProcess(const std::string& dispatcher, std::vector<std::string> extra_flags,
                             const std::string& address) {
  std::vector<std::string> argv = {DispatchWorkerBinary(),    "--dispatcher=" + dispatcher,
                                   "--address=" + address,    "--heartbeat-ms=100",
                                   "--backoff-initial-ms=20", "--backoff-max-ms=200",
                                   "--log-level=warning"};
  for (auto& flag : extra_flags) argv.push_back(flag);
  process_ = std::make_unique<Subprocess>(argv);
  static const std::string kPrefix = "dispatch-worker ";
  auto line = process_->ReadLine(kTestDeadline);
  size_t end = line ? line->find(" started") : std::string::npos;
  if (end == std::string::npos || line->rfind(kPrefix, 0) != 0) {
    throw std::runtime_error("dispatch-worker did not start; got: " + line.value_or("<nothing>"));
  }
  address_ = line->substr(kPrefix.size(), end - kPrefix.size());
}

void WorkerProcess::Kill9() {
  process_->Signal(SIGKILL);
  if (!process_->Wait(kTestDeadline).has_value()) {
    throw std::runtime_error("dispatch-worker " + address_ + " did not die of SIGKILL");
  }
  if (address_.rfind("unix:", 0) == 0) unlink(address_.c_str() + 5);
}

uint64_t WorkerProcess::WaitRegistered(std::chrono::milliseconds timeout) {
  static const std::string kPrefix = "dispatch-worker registered as worker ";
  auto line = process_->ReadLine(timeout);
  if (!line || line->rfind(kPrefix, 0) != 0) return 0;
  return strtoull(line->c_str() + kPrefix.size(), nullptr, 10);
}

CommandResult RunDispatchctl(const std::vector<std::string>& args) {
  // Through sh so stderr joins stdout: error messages are part of the result.
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", DispatchctlBinary()};
  for (auto& a : args) argv.push_back(a);
  Subprocess process(argv);
  CommandResult result;
  while (auto line = process.ReadLine(kTestDeadline)) result.output += *line + "\n";
  auto status = process.Wait(kTestDeadline);
  if (status && WIFEXITED(*status)) result.exit_code = WEXITSTATUS(*status);
  return result;
}

namespace {

class RecordingTask final : public clients::TaskHandler {
 public:
  RecordingTask(std::function<void(const std::function<void(RecordingFactory::Record&)>&)> update,
                uint64_t task_id)
      : update_(std::move(update)), task_id_(task_id) {}
  ~RecordingTask() noexcept(false) override {
    update_([this](RecordingFactory::Record& r) { r.deleted.insert(task_id_); });
  }

  kj::Promise<void> Run(clients::TaskContext& context) override {
    if (context.task().processing_mode != rpc::ProcessingMode::DYNAMIC) return kj::NEVER_DONE;
    return Read(context);
  }

 private:
  kj::Promise<void> Read(clients::TaskContext& context) {
    uint64_t sequence = context.splits(0).next_sequence();
    return context.splits(0).Next(0).then(
        [this, &context, sequence](clients::SplitBatch&& batch) -> kj::Promise<void> {
          update_([&](RecordingFactory::Record& r) {
            r.sequences.push_back(sequence);
            for (auto& split : batch.splits) r.splits.insert(split.index);
            if (batch.end_of_splits) r.completed.insert(task_id_);
          });
          if (batch.end_of_splits) return kj::READY_NOW;
          return Read(context);
        });
  }

  std::function<void(const std::function<void(RecordingFactory::Record&)>&)> update_;
  uint64_t task_id_;
};

}  // namespace

kj::Own<clients::TaskHandler> RecordingFactory::CreateHandler(
    const clients::TaskDescription& task) {
  auto state = state_;
  auto update = [state](const std::function<void(Record&)>& change) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      change(state->record);
    }
    state->changed.notify_all();
  };
  update([&](Record& r) { r.started.insert(task.task_id); });
  return kj::heap<RecordingTask>(update, task.task_id);
}

RecordingFactory::Record RecordingFactory::State::Snapshot() {
  std::lock_guard<std::mutex> lock(mu);
  return record;
}

bool RecordingFactory::State::WaitFor(const std::function<bool(const Record&)>& condition,
                                      std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu);
  return changed.wait_for(lock, timeout, [&] { return condition(record); });
}

TestAgent::TestAgent(const std::string& dispatcher, const std::string& name, uint64_t seed,
                     uint32_t heartbeat_ms) {
  clients::WorkerAgentOptions options;
  options.dispatcher_address = dispatcher;
  options.worker_address = name;
  options.heartbeat_interval_ms = heartbeat_ms;
  options.backoff_initial_ms = 20;
  options.backoff_max_ms = 200;
  options.split_batch = 7;
  options.seed = seed;
  auto factory = std::make_unique<RecordingFactory>();
  records = factory->state();
  agent = std::make_unique<clients::WorkerAgent>(options, std::move(factory));
}

}  // namespace dispatch::testing
