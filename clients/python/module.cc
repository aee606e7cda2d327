// dispatch._dispatch: the extension module behind the `dispatch` package.
#include "clients/python/bindings.h"

PYBIND11_MODULE(_dispatch, m) {
  m.doc() = "Private: the C++ clients under the dispatch package. Use `import dispatch`.";
  dispatch::python::BindStatus(m);
  dispatch::python::BindBuffer(m);
  dispatch::python::BindCoordinator(m);
  dispatch::python::BindWorker(m);
  dispatch::python::BindReader(m);
}
