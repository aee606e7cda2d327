// The parts of the `dispatch._dispatch` extension module, one per file. The
// Python package (clients/python/dispatch) is the public API; this module is
// its private layer over the C++ clients: bytes in, bytes out, Status errors
// raised as the package's exception classes, and the GIL released whenever
// C++ waits.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "common/status.h"

namespace dispatch::python {

namespace py = pybind11;

// A Status error on its way to Python: the translator BindStatus() installs
// raises it as the class the package registered for its code.
struct StatusError {
  Status status;
};


inline void RaiseIfError(const Status& status) {
  if (!status.ok()) throw StatusError{status};
}

template <typename T>
T ValueOrRaise(Result<T>&& result) {
  if (!result.ok()) throw StatusError{result.status()};
  return std::move(*result);
}

// Bytes of a C++ string as a Python bytes object (one copy).
inline py::bytes Bytes(const std::string& data) { return py::bytes(data.data(), data.size()); }

// An element's bytes as a Buffer object (buffer protocol, no copy).
py::object MakeBuffer(std::string data);

void BindStatus(py::module_& m);
void BindBuffer(py::module_& m);
void BindCoordinator(py::module_& m);
void BindWorker(py::module_& m);
void BindReader(py::module_& m);

}  // namespace dispatch::python
