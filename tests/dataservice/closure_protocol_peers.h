// Test-side peers of the closure protocol, for the protocol-level tests
// (closure_protocol_test.cc, closure_retry_protocol_test.cc): a worker whose
// WorkerControl records every push and that reports exactly what a test
// says, and a coordinator session speaking the schema directly.
#pragma once

#include <algorithm>
#include <deque>
#include <iterator>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/closure_limits.h"
#include "tests/dataservice/ds_test_util.h"

namespace dispatch::testing {

struct Pushed {
  uint64_t closure_id = 0;
  uint32_t attempt = 0;
  std::string function;
  std::string args;
  std::vector<std::string> inputs;  // ClosureAssignment.inputs
};

// Records every runClosures push.
class RecordingControl final : public rpc::WorkerControl::Server {
 public:
  explicit RecordingControl(std::shared_ptr<std::deque<Pushed>> log) : log_(std::move(log)) {}

 protected:
  kj::Promise<void> startTasks(StartTasksContext) override { return kj::READY_NOW; }
  kj::Promise<void> deleteTasks(DeleteTasksContext) override { return kj::READY_NOW; }
  kj::Promise<void> runClosures(RunClosuresContext context) override {
    for (auto c : context.getParams().getClosures()) {
      log_->push_back({c.getClosureId(), c.getAttempt(), c.getFunction().cStr(),
                       std::string(c.getArgs().asChars().begin(), c.getArgs().size()),
                       {}});
      for (auto input : c.getInputs())
        log_->back().inputs.emplace_back(input.asChars().begin(), input.size());
    }
    return kj::READY_NOW;
  }
  // Recorded as pushes with attempt 0 and function "<cancel>".
  kj::Promise<void> cancelClosures(CancelClosuresContext context) override {
    for (uint64_t id : context.getParams().getClosureIds()) log_->push_back({id, 0, "<cancel>", ""});
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<std::deque<Pushed>> log_;
};

// A worker with closure slots that answers by hand.
class ClosureWorker {
 public:
  // `send_control` false: its heartbeats carry no WorkerControl.
  ClosureWorker(ClientLoop& loop, const std::string& dispatcher, std::string address,
                uint32_t slots, bool send_control = true)
      : loop_(loop), address_(std::move(address)), slots_(slots), send_control_(send_control),
        log_(std::make_shared<std::deque<Pushed>>()), conn_(loop.Connect(dispatcher)) {}

  Status Heartbeat() {
    auto request = conn_->dispatcher().workerHeartbeatRequest();
    auto r = request.initRequest();
    r.setAddress(address_);
    r.setWorkerIncarnation(77);
    r.setMaxClosures(slots_);
    // It runs nothing itself, but is given only closures of functions it lists.
    static const char* const kFunctions[] = {"echo", "noop", "sleep", "crash", "fail"};
    auto functions = r.initFunctions(std::size(kFunctions));
    for (unsigned i = 0; i < std::size(kFunctions); ++i) functions.set(i, kFunctions[i]);
    if (send_control_) r.setControl(kj::heap<RecordingControl>(log_));
    auto reply = Try(loop_, request.send().then([](auto response) {
      return response.getResponse().getWorkerId();
    }));
    if (!reply.ok()) return reply.status();
    worker_id_ = *reply;
    return Status::Ok();
  }

  // Sends a result report without waiting; the promise says ignored.
  kj::Promise<uint32_t> SendReport(uint64_t closure_id, uint32_t attempt, const std::string& result) {
    auto request = conn_->dispatcher().reportClosuresRequest();
    request.setWorkerId(worker_id_);
    auto report = request.initReports(1)[0];
    report.setClosureId(closure_id);
    report.setAttempt(attempt);
    report.setResult(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(result.data()),
                                         result.size()));
    return request.send().then([](auto response) { return response.getIgnored(); });
  }

  // Reports a result (or a user error when `error` is set); returns ignored.
  Result<uint32_t> Report(uint64_t closure_id, uint32_t attempt, const std::string& result,
                          const char* error = nullptr, uint64_t worker_id = 0) {
    auto request = conn_->dispatcher().reportClosuresRequest();
    request.setWorkerId(worker_id != 0 ? worker_id : worker_id_);
    auto report = request.initReports(1)[0];
    report.setClosureId(closure_id);
    report.setAttempt(attempt);
    if (error != nullptr) {
      report.setUserError(error);
    } else {
      report.setResult(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(result.data()),
                                           result.size()));
    }
    return Try(loop_, request.send().then([](auto response) { return response.getIgnored(); }));
  }

  bool WaitForPushes(size_t n) {
    return WaitUntil([&]() { return log_->size() >= n; }, loop_);
  }
  std::deque<Pushed>& pushed() { return *log_; }
  uint64_t worker_id() const { return worker_id_; }
  void Disconnect() { conn_ = nullptr; }

 private:
  ClientLoop& loop_;
  std::string address_;
  uint32_t slots_;
  bool send_control_;
  std::shared_ptr<std::deque<Pushed>> log_;
  kj::Own<clients::DispatcherConnection> conn_;
  uint64_t worker_id_ = 0;
};

struct Outcome {
  uint64_t closure_id = 0;
  rpc::ClosureState state = rpc::ClosureState::QUEUED;
  std::string result;
  std::string error;
};

class Coordinator {
 public:
  Coordinator(ClientLoop& loop, const std::string& dispatcher, uint64_t id)
      : loop_(loop), conn_(loop.Connect(dispatcher)) {
    auto request = conn_->dispatcher().openCoordinatorRequest();
    request.setCoordinatorId(id);
    session_ = request.send().getCoordinator();
  }

  // Schedules `functions` (args "a<i>"); returns ids, or the raised error.
  struct Scheduled {
    std::vector<uint64_t> ids;
    std::string error;
  };
  kj::Promise<Scheduled> ScheduleAsync(const std::vector<std::string>& functions,
                                       uint64_t first_request_id = 0) {
    auto request = session_.scheduleRequest();
    auto list = request.initClosures(static_cast<unsigned>(functions.size()));
    for (unsigned i = 0; i < functions.size(); ++i) {
      list[i].setFunction(functions[i]);
      std::string args = "a" + std::to_string(i);
      list[i].setArgs(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(args.data()),
                                          args.size()));
      if (first_request_id != 0) list[i].setRequestId(first_request_id + i);
    }
    return request.send().then([](auto response) {
      Scheduled out;
      for (uint64_t id : response.getClosureIds()) out.ids.push_back(id);
      if (response.getError().getClosureId() != 0)
        out.error = response.getError().getMessage().cStr();
      return out;
    });
  }
  Result<Scheduled> Schedule(const std::vector<std::string>& functions,
                             uint64_t first_request_id = 0) {
    return Try(loop_, ScheduleAsync(functions, first_request_id));
  }
  // Schedules "echo" closures, item i with `inputs[i]` (ClosureSpec.inputs as sent).
  Result<Scheduled> ScheduleWithInputs(const std::vector<std::vector<uint64_t>>& inputs) {
    auto request = session_.scheduleRequest();
    auto list = request.initClosures(static_cast<unsigned>(inputs.size()));
    for (unsigned i = 0; i < inputs.size(); ++i) {
      list[i].setFunction("echo");
      auto in = list[i].initInputs(static_cast<unsigned>(inputs[i].size()));
      for (unsigned j = 0; j < inputs[i].size(); ++j) in.set(j, inputs[i][j]);
    }
    return Try(loop_, request.send().then([](auto response) {
      Scheduled out;
      for (uint64_t id : response.getClosureIds()) out.ids.push_back(id);
      return out;
    }));
  }

  Result<std::vector<Outcome>> Await(const std::vector<uint64_t>& release = {}) {
    auto request = session_.awaitResultsRequest();
    auto list = request.initRelease(static_cast<unsigned>(release.size()));
    for (unsigned i = 0; i < release.size(); ++i) list.set(i, release[i]);
    return Try(loop_, request.send().then([](auto response) {
      std::vector<Outcome> out;
      for (auto r : response.getResults()) {
        out.push_back({r.getClosureId(), r.getState(),
                       std::string(r.getResult().asChars().begin(), r.getResult().size()),
                       r.getError().cStr()});
      }
      return out;
    }));
  }

  // An awaitResults left waiting (nothing released); settles when it returns.
  kj::Promise<void> AwaitPending() {
    return session_.awaitResultsRequest().send().ignoreResult();
  }

  // join(wait=false): done, and the raised error if any.
  Result<std::pair<bool, std::string>> Done() {
    auto request = session_.joinRequest();
    request.setWait(false);
    return Try(loop_, request.send().then([](auto response) {
      return std::make_pair(static_cast<bool>(response.getDone()),
                            std::string(response.getError().getMessage().cStr()));
    }));
  }

  // createPerWorkerResource: the resource id, or the error's description.
  Result<uint64_t> CreateResource(const std::string& function, uint64_t request_id) {
    auto request = session_.createPerWorkerResourceRequest();
    request.setFunction(function);
    request.setRequestId(request_id);
    return Try(loop_, request.send().then([](auto response) { return response.getResourceId(); }));
  }

  // cancel: each closure's state after the call.
  Result<std::vector<rpc::ClosureState>> Cancel(const std::vector<uint64_t>& ids) {
    auto request = session_.cancelRequest();
    auto list = request.initClosureIds(static_cast<unsigned>(ids.size()));
    for (unsigned i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
    return Try(loop_, request.send().then([](auto response) {
      std::vector<rpc::ClosureState> out;
      for (auto state : response.getStates()) out.push_back(state);
      return out;
    }));
  }

  Result<std::vector<Outcome>> Outcomes(const std::vector<uint64_t>& ids) {
    auto request = session_.getOutcomesRequest();
    auto list = request.initClosureIds(static_cast<unsigned>(ids.size()));
    for (unsigned i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
    return Try(loop_, request.send().then([](auto response) {
      std::vector<Outcome> out;
      for (auto r : response.getOutcomes()) {
        out.push_back({r.getClosureId(), r.getState(),
                       std::string(r.getResult().asChars().begin(), r.getResult().size()),
                       r.getError().cStr()});
      }
      return out;
    }));
  }

 private:
  ClientLoop& loop_;
  kj::Own<clients::DispatcherConnection> conn_;
  rpc::Coordinator::Client session_ = nullptr;
};

inline uint64_t ReportsIgnored(DsClient& client, ClientLoop& loop) {
  return *Try(loop, client.dispatcher().getClosureStatsRequest().send().then(
                        [](auto r) { return r.getStats().getReportsIgnored(); }));
}

}  // namespace dispatch::testing
