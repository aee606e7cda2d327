// Coordinator and RemoteValue for Python: the C++ Coordinator with the GIL
// released while it waits, and waits that Ctrl-C can interrupt.
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "clients/coordinator.h"
#include "clients/python/bindings.h"

namespace dispatch::python {
namespace {

using clients::Coordinator;
using clients::CoordinatorOptions;
using clients::RemoteValue;
using clients::RemoteValueStatus;
using clients::ScheduleOptions;

// How long one uninterruptible wait lasts: a signal (Ctrl-C) is seen within it.
constexpr std::chrono::milliseconds kWaitSlice{100};

// Raises KeyboardInterrupt (or whatever a signal handler raised) pending
// since the last check.
void CheckSignals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

class PyRemoteValue {
 public:
  explicit PyRemoteValue(RemoteValue value) : value_(std::move(value)) {}

  uint64_t closure_id() const { return value_.closure_id(); }
  std::string status() const { return clients::RemoteValueStatusName(value_.status()); }
  bool done() const { return value_.status() != RemoteValueStatus::kPending; }

  // The result bytes; None when `timeout` (seconds) passed first.
  py::object Fetch(std::optional<double> timeout) const {
    auto deadline = std::chrono::steady_clock::now();
    if (timeout) deadline += std::chrono::microseconds(static_cast<int64_t>(*timeout * 1e6));
    while (true) {
      std::chrono::milliseconds slice = kWaitSlice;
      if (timeout) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        slice = std::max(std::chrono::milliseconds(0), std::min(slice, left));
      }
      std::optional<Result<std::string>> fetched;
      {
        py::gil_scoped_release released;
        if (value_.status() != RemoteValueStatus::kPending || value_.coordinator_closed()) {
          fetched.emplace(value_.Fetch());
        } else {
          Result<std::string> got = value_.FetchFor(slice);
          if (got.ok() || value_.status() != RemoteValueStatus::kPending ||
              value_.coordinator_closed()) {
            fetched.emplace(std::move(got));
          }
        }
      }
      if (fetched) return Bytes(ValueOrRaise(std::move(*fetched)));
      CheckSignals();
      if (timeout && std::chrono::steady_clock::now() >= deadline) return py::none();
    }
  }

  void Cancel() const {
    Status cancelled;
    {
      py::gil_scoped_release released;
      cancelled = value_.Cancel();
    }
    RaiseIfError(cancelled);
  }

  // ScheduleOptions.trace's stamps (common/closure_trace.h); empty when
  // untraced or before the outcome arrived.
  std::vector<uint64_t> Trace() const { return value_.Trace(); }

  const RemoteValue& value() const { return value_; }

 private:
  RemoteValue value_;
};

class PyCoordinator {
 public:
  PyCoordinator(std::string address, std::string token, uint64_t coordinator_id,
                uint32_t connect_timeout_ms) {
    CoordinatorOptions options;
    options.dispatcher_address = std::move(address);
    options.token = std::move(token);
    options.coordinator_id = coordinator_id;
    options.connect_timeout_ms = connect_timeout_ms;
    Result<std::unique_ptr<Coordinator>> created = UnavailableError("not started");
    {
      py::gil_scoped_release released;
      created = Coordinator::Create(std::move(options));
    }
    coordinator_ = ValueOrRaise(std::move(created));
  }

  ~PyCoordinator() {
    py::gil_scoped_release released;
    if (coordinator_ != nullptr) coordinator_->Close();  // ends a join still running
    coordinator_.reset();
  }

  uint64_t id() const { return Live().id(); }

  PyRemoteValue Schedule(std::string function, std::string args, std::vector<uint64_t> resources,
                         int32_t priority, uint64_t timeout_ms,
                         const std::vector<const PyRemoteValue*>& inputs, bool trace) {
    ScheduleOptions options;
    options.trace = trace;
    options.resources = std::move(resources);
    options.priority = priority;
    options.timeout = std::chrono::milliseconds(timeout_ms);
    for (const PyRemoteValue* input : inputs) options.inputs.push_back(input->value());
    Coordinator& coordinator = Live();
    Result<RemoteValue> scheduled = UnavailableError("not scheduled");
    {
      py::gil_scoped_release released;
      scheduled = coordinator.Schedule(std::move(function), std::move(args), std::move(options));
    }
    return PyRemoteValue(ValueOrRaise(std::move(scheduled)));
  }

  // Join() on a thread of its own, so that the caller's wait can be
  // interrupted (Ctrl-C): an interrupted join goes on in the background until
  // it ends or the coordinator closes, and keeps the coordinator alive.
  void Join() {
    std::shared_ptr<Coordinator> coordinator = LiveShared();
    auto answer = std::make_shared<std::promise<Status>>();
    std::future<Status> joined = answer->get_future();
    std::thread([coordinator, answer]() { answer->set_value(coordinator->Join()); }).detach();
    while (true) {
      bool ready;
      {
        py::gil_scoped_release released;
        ready = joined.wait_for(kWaitSlice) == std::future_status::ready;
      }
      if (ready) return RaiseIfError(joined.get());
      CheckSignals();
    }
  }

  bool Done() {
    Coordinator& coordinator = Live();
    Result<bool> done = UnavailableError("not asked");
    {
      py::gil_scoped_release released;
      done = coordinator.Done();
    }
    return ValueOrRaise(std::move(done));
  }

  uint64_t CreatePerWorkerResource(std::string function, std::string args) {
    Coordinator& coordinator = Live();
    Result<uint64_t> created = UnavailableError("not created");
    {
      py::gil_scoped_release released;
      created = coordinator.CreatePerWorkerResource(std::move(function), std::move(args));
    }
    return ValueOrRaise(std::move(created));
  }

  void Close() {
    py::gil_scoped_release released;
    if (coordinator_ != nullptr) coordinator_->Close();
  }

 private:
  Coordinator& Live() const { return *LiveShared(); }
  std::shared_ptr<Coordinator> LiveShared() const {
    if (coordinator_ == nullptr) {
      throw StatusError{FailedPreconditionError("the coordinator is closed")};
    }
    return coordinator_;
  }

  std::shared_ptr<Coordinator> coordinator_;
};

}  // namespace

void BindCoordinator(py::module_& m) {
  py::class_<PyRemoteValue>(m, "RemoteValue")
      .def_property_readonly("closure_id", &PyRemoteValue::closure_id)
      .def_property_readonly("status", &PyRemoteValue::status)
      .def("done", &PyRemoteValue::done)
      .def("fetch", &PyRemoteValue::Fetch, py::arg("timeout") = py::none())
      .def("cancel", &PyRemoteValue::Cancel)
      .def("trace", &PyRemoteValue::Trace);
  py::class_<PyCoordinator>(m, "Coordinator")
      .def(py::init<std::string, std::string, uint64_t, uint32_t>(), py::arg("address"),
           py::arg("token"), py::arg("coordinator_id"), py::arg("connect_timeout_ms"))
      .def_property_readonly("id", &PyCoordinator::id)
      .def("schedule", &PyCoordinator::Schedule, py::arg("function"), py::arg("args"),
           py::arg("resources"), py::arg("priority"), py::arg("timeout_ms"), py::arg("inputs"),
           py::arg("trace") = false)
      .def("join", &PyCoordinator::Join)
      .def("done", &PyCoordinator::Done)
      .def("create_per_worker_resource", &PyCoordinator::CreatePerWorkerResource,
           py::arg("function"), py::arg("args"))
      .def("close", &PyCoordinator::Close);
}

}  // namespace dispatch::python
