// Status errors and element buffers.
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "clients/python/bindings.h"

namespace dispatch::python {
namespace {

// The package's factory: (code_name, message) -> exception instance. Held
// for the life of the process (never released: it may be needed while the
// interpreter shuts down, after module objects are gone).
PyObject* error_factory = nullptr;

void RaiseStatus(const Status& status) {
  if (error_factory == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, status.ToString().c_str());
    return;
  }
  py::object factory = py::reinterpret_borrow<py::object>(error_factory);
  py::object exception = factory(StatusCodeName(status.code()), status.message());
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
}

// An element's bytes as the C++ reader produced them, exposed read-only
// through the buffer protocol: memoryview(buffer) and numpy.frombuffer see
// them without a copy.
class Buffer {
 public:
  explicit Buffer(std::string data) : data_(std::move(data)) {}
  const std::string& data() const { return data_; }

 private:
  std::string data_;
};

}  // namespace

void BindStatus(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const StatusError& e) {
      RaiseStatus(e.status);
    }
  });
  m.def(
      "set_error_factory",
      [](py::object factory) {
        PyObject* old = error_factory;
        error_factory = factory.release().ptr();
        Py_XDECREF(old);
      },
      "Registers f(code_name, message) -> exception, used for every error this module raises.");
}

void BindBuffer(py::module_& m) {
  py::class_<Buffer>(m, "Buffer", py::buffer_protocol(),
                     "Read-only bytes of one element, without a copy (buffer protocol).")
      .def_buffer([](Buffer& b) -> py::buffer_info {
        return py::buffer_info(const_cast<char*>(b.data().data()), 1,
                               py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.data().size())}, {1},
                               /*readonly=*/true);
      })
      .def("__len__", [](const Buffer& b) { return b.data().size(); })
      .def("__bytes__", [](const Buffer& b) { return Bytes(b.data()); });
}

// Used by the reader: an element's bytes handed to Python without a copy.
py::object MakeBuffer(std::string data) { return py::cast(Buffer(std::move(data))); }

}  // namespace dispatch::python
