// Worker for Python: a WorkerAssembly whose closure functions and dataset
// kinds call into Python, holding the GIL only while Python runs: closures on
// the agent's executor threads (through a PythonCallQueue, which batches the
// GIL hand-offs), element production on the agent thread (one element per
// call, as for every source). The package's worker
// module supplies two Python callables that do the (un)pickling:
//   runner(name, args, resources, inputs, closure) -> (kind, bytes)
// where `closure` is a ClosureContext: the running call's cancelled flag,
// stopping flag and SleepFor, valid only until the runner returns.
//   opener(kind, args, split_index, split_payload) -> iterator of bytes-like
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "clients/builtin_dataset_kinds.h"
#include "clients/dataset_definition.h"
#include "clients/dataset_kind.h"
#include "clients/python/bindings.h"
#include "clients/python/python_call_queue.h"
#include "clients/python/thread_gil.h"
#include "clients/worker_assembly.h"

namespace dispatch::python {
namespace {

using clients::ClosureCall;
using clients::ClosureOutput;
using clients::ElementSource;
using clients::KindDefinition;
using clients::Shard;
using clients::SplitItem;

// A Python object that may be dropped on a thread without the GIL.
struct PyRef {
  explicit PyRef(py::object o) : object(std::move(o)) {}
  ~PyRef() {
    if (!Py_IsInitialized()) {
      (void)object.release();  // the interpreter is gone: nothing to release
      return;
    }
    ThreadGil gil;
    object = py::object();
  }
  py::object object;
};

// The bytes of a bytes-like Python object (bytes, bytearray, memoryview,
// numpy arrays...), copied into `out`.
Status CopyBytesLike(PyObject* object, std::string* out) {
  if (PyBytes_Check(object)) {
    out->assign(PyBytes_AS_STRING(object), static_cast<size_t>(PyBytes_GET_SIZE(object)));
    return Status::Ok();
  }
  Py_buffer view;
  if (PyObject_GetBuffer(object, &view, PyBUF_C_CONTIGUOUS) != 0) {
    PyErr_Clear();
    return InvalidArgumentError(std::string("an element must be bytes-like, got ") +
                                Py_TYPE(object)->tp_name);
  }
  out->assign(static_cast<const char*>(view.buf), static_cast<size_t>(view.len));
  PyBuffer_Release(&view);
  return Status::Ok();
}

// The elements of one split: a Python iterator pulled one element per Next().
class PythonSplitSource final : public ElementSource {
 public:
  PythonSplitSource(std::string what, py::object iterator)
      : what_(std::move(what)), iterator_(std::make_unique<PyRef>(std::move(iterator))) {}

  Result<bool> Next(std::string* element) override {
    ThreadGil gil;
    PyObject* item = PyIter_Next(iterator_->object.ptr());
    if (item == nullptr) {
      if (PyErr_Occurred() == nullptr) return false;
      py::error_already_set raised;
      return InternalError(what_ + " raised " + raised.what());
    }
    py::object held = py::reinterpret_steal<py::object>(item);
    Status copied = CopyBytesLike(item, element);
    if (!copied.ok()) return InvalidArgumentError(what_ + ": " + copied.message());
    return true;
  }

 private:
  const std::string what_;
  std::unique_ptr<PyRef> iterator_;
};

// What a Python function may ask about the closure it runs in (the C++
// ClosureCall's cancelled(), stopping() and SleepFor()). The call it wraps is
// valid only during the call: RunClosure ends it before returning, after
// which the context answers as for a closure that is over (cancelled and
// stopping true, sleep() false at once). Every access holds the GIL, which
// orders it with End().
class ClosureContext {
 public:
  explicit ClosureContext(const ClosureCall* call) : call_(call) {}

  void End() { call_ = nullptr; }

  bool cancelled() const { return call_ == nullptr || call_->cancelled(); }
  bool stopping() const { return call_ == nullptr || call_->stopping(); }
  std::string worker_address() const { return call_ == nullptr ? "" : call_->worker_address(); }

  // Waits up to `seconds` with the GIL released; false when the wait ended
  // early because the closure was cancelled (or timed out) or the worker is
  // stopping. The call cannot end meanwhile: only this call's own thread,
  // which is here, returns from it.
  bool Sleep(double seconds) const {
    if (call_ == nullptr) return false;
    const ClosureCall* call = call_;
    auto duration = std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, seconds) * 1000));
    py::gil_scoped_release released;
    return call->SleepFor(duration);
  }

 private:
  const ClosureCall* call_;
};

class PyWorker {
 public:
  PyWorker(std::string dispatcher, std::string address, std::string token, uint32_t slots,
           std::vector<std::string> tags, uint32_t heartbeat_ms, py::object runner,
           py::object opener)
      : runner_(std::make_shared<PyRef>(std::move(runner))),
        opener_(std::make_shared<PyRef>(std::move(opener))) {
    options_.agent.dispatcher_address = std::move(dispatcher);
    options_.agent.worker_address = std::move(address);
    options_.agent.token = std::move(token);
    options_.agent.max_closures = slots;
    options_.agent.tags = std::move(tags);
    options_.agent.heartbeat_interval_ms = heartbeat_ms;
    // A process taking over a dead worker's address continues its tasks'
    // split streams above the dead one's sequence numbers (as dispatch-worker).
    // The reference kinds too (range, synthetic, lines): the worker announces
    // every kind it registered, and the dispatcher gives it tasks of those.
    RaiseIfError(clients::RegisterBuiltinDatasetKinds(kinds_));
    options_.agent.first_split_sequence =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
  }

  ~PyWorker() { Stop(); }

  void RegisterFunction(std::string name) {
    RequireNotStarted();
    if (name.empty()) throw StatusError{InvalidArgumentError("a function needs a name")};
    if (!function_names_.insert(name).second) {
      throw StatusError{AlreadyExistsError("function '" + name + "' is registered already")};
    }
  }

  void RegisterDatasetKind(std::string kind) {
    RequireNotStarted();
    std::shared_ptr<PyRef> opener = opener_;
    RaiseIfError(kinds_.Register(
        kind, [opener, kind](const KindDefinition& definition,
                             const Shard& shard) -> Result<std::unique_ptr<ElementSource>> {
          return OpenShard(opener, kind, definition, shard);
        }));
  }

  // Starts the worker; returns the address it registers with (the bound
  // one when asked for port 0).
  std::string Start(double timeout_seconds) {
    RequireNotStarted();
    Result<std::unique_ptr<clients::WorkerAssembly>> created =
        clients::WorkerAssembly::Create(options_, kinds_);
    assembly_ = ValueOrRaise(std::move(created));
    std::shared_ptr<PyRef> runner = runner_;
    for (const std::string& name : function_names_) {
      std::shared_ptr<PythonCallQueue> calls = calls_;
      RaiseIfError(assembly_->agent().RegisterFunction(
          name, [runner, calls, name](const ClosureCall& call) {
            return calls->Run([&]() { return RunClosure(*runner, name, call); });
          }));
    }
    Status started;
    {
      py::gil_scoped_release released;
      started = assembly_->Start(std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
    }
    RaiseIfError(started);
    return assembly_->worker_address();
  }

  // Waits for running closures (which may need the GIL: it is released).
  void Stop() {
    if (assembly_ == nullptr) return;
    py::gil_scoped_release released;
    assembly_->Stop();
  }

  py::dict AgentStatus() const {
    py::dict out;
    if (assembly_ == nullptr) return out;
    clients::WorkerAgentStatus s = assembly_->agent().status();
    out["running"] = s.running;
    out["connected"] = s.connected;
    out["registered"] = s.registered;
    out["worker_id"] = s.worker_id;
    out["registrations"] = s.registrations;
    out["heartbeats"] = s.heartbeats;
    out["tasks_started"] = s.tasks_started;
    out["tasks_completed"] = s.tasks_completed;
    out["closures_received"] = s.closures_received;
    out["closures_run"] = s.closures_run;
    out["resources_built"] = s.resources_built;
    out["tasks"] = s.tasks;
    return out;
  }

 private:
  void RequireNotStarted() const {
    if (assembly_ != nullptr) {
      throw StatusError{FailedPreconditionError("the worker has started: register before start()")};
    }
  }

  // REQUIRES: the GIL is held.
  static ClosureOutput RunClosure(const PyRef& runner, const std::string& name,
                                  const ClosureCall& call) {
    try {
      py::list resources;
      for (const std::string& r : call.resources()) resources.append(Bytes(r));
      py::list inputs;
      for (const std::string& r : call.inputs()) inputs.append(Bytes(r));
      py::object context = py::cast(ClosureContext(&call));
      struct Ender {
        py::object& context;
        ~Ender() { context.cast<ClosureContext&>().End(); }
      } ender{context};
      py::object out = runner.object(name, py::bytes(call.args().data(), call.args().size()),
                                     resources, inputs, context);
      auto pair = out.cast<std::pair<int, py::bytes>>();
      std::string data = pair.second;
      switch (pair.first) {
        case 0:
          return ClosureOutput::Result(std::move(data));
        case 1:
          return ClosureOutput::UserError(std::move(data));
        case 2:
          return ClosureOutput::TransientError(std::move(data));
        default:
          return ClosureOutput::Unavailable(std::move(data));
      }
    } catch (py::error_already_set& e) {
      return ClosureOutput::UserError(std::string("the worker's Python runner failed: ") + e.what());
    } catch (py::cast_error& e) {
      return ClosureOutput::UserError(std::string("the worker's Python runner answered badly: ") +
                                      e.what());
    }
  }

  static Result<std::unique_ptr<ElementSource>> OpenShard(const std::shared_ptr<PyRef>& opener,
                                                          const std::string& kind,
                                                          const KindDefinition& definition,
                                                          const Shard& shard) {
    Result<uint64_t> num_splits = definition.Uint("splits", 0, 0, uint64_t{1} << 40);
    if (!num_splits.ok()) return num_splits.status();
    if (shard.kind != Shard::Kind::kSplit && *num_splits == 0 && definition.files.empty()) {
      return InvalidArgumentError("a " + kind + " dataset needs splits=N or split lines");
    }
    auto args = std::make_shared<std::map<std::string, std::string>>(definition.args);
    bool explicit_splits = !definition.files.empty();
    auto open_split = [opener, kind, args, explicit_splits](
                          const SplitItem& split) -> Result<std::unique_ptr<ElementSource>> {
      std::string what = "split " + std::to_string(split.index) + " of a " + kind + " dataset";
      ThreadGil gil;
      try {
        py::object payload = explicit_splits ? py::object(py::str(split.payload)) : py::none();
        py::object iterator = opener->object(kind, *args, split.index, payload);
        return std::unique_ptr<ElementSource>(
            std::make_unique<PythonSplitSource>(what, std::move(iterator)));
      } catch (py::error_already_set& e) {
        return InvalidArgumentError(what + " could not be opened: " + e.what());
      }
    };
    std::vector<SplitItem> splits =
        clients::SplitsOfShard(shard, *num_splits, definition.files);
    if (splits.size() == 1) return open_split(splits[0]);
    return std::unique_ptr<ElementSource>(
        std::make_unique<clients::SplitChainSource>(std::move(splits), open_split));
  }

  clients::WorkerAssemblyOptions options_;
  clients::DatasetKindRegistry kinds_;
  std::set<std::string> function_names_;
  std::shared_ptr<PyRef> runner_;
  std::shared_ptr<PyRef> opener_;
  std::shared_ptr<PythonCallQueue> calls_ = std::make_shared<PythonCallQueue>();
  std::unique_ptr<clients::WorkerAssembly> assembly_;  // declared last: stopped first
};

}  // namespace

void BindWorker(py::module_& m) {
  py::class_<ClosureContext>(m, "ClosureContext")
      .def_property_readonly("cancelled", &ClosureContext::cancelled)
      .def_property_readonly("stopping", &ClosureContext::stopping)
      .def_property_readonly("worker_address", &ClosureContext::worker_address)
      .def("sleep", &ClosureContext::Sleep, py::arg("seconds"));
  py::class_<PyWorker>(m, "Worker")
      .def(py::init<std::string, std::string, std::string, uint32_t, std::vector<std::string>,
                    uint32_t, py::object, py::object>(),
           py::arg("dispatcher"), py::arg("address"), py::arg("token"), py::arg("slots"),
           py::arg("tags"), py::arg("heartbeat_ms"), py::arg("runner"), py::arg("opener"))
      .def("register_function", &PyWorker::RegisterFunction, py::arg("name"))
      .def("register_dataset_kind", &PyWorker::RegisterDatasetKind, py::arg("kind"))
      .def("start", &PyWorker::Start, py::arg("timeout"))
      .def("stop", &PyWorker::Stop)
      .def("status", &PyWorker::AgentStatus);
}

}  // namespace dispatch::python
