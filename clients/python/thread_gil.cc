#include "clients/python/thread_gil.h"

namespace dispatch::python {
namespace {

// The Python thread state this file made for the current thread, ended when
// the thread exits.
class KeptState {
 public:
  KeptState() = default;
  KeptState(const KeptState&) = delete;
  KeptState& operator=(const KeptState&) = delete;

  ~KeptState() {
    // During or after the interpreter's finalization a thread must not take
    // the GIL: the interpreter clears what is left of the state itself.
    if (state_ == nullptr || !Py_IsInitialized() || _Py_IsFinalizing()) return;
    PyEval_RestoreThread(state_);
    PyThreadState_Clear(state_);
    PyThreadState_DeleteCurrent();  // lets the GIL go
  }

  // The state the thread takes the GIL with: its own when Python gave it
  // one (or we did earlier), else a new one, kept.
  PyThreadState* Get() {
    if (PyThreadState* existing = PyGILState_GetThisThreadState()) return existing;
    state_ = PyThreadState_New(PyInterpreterState_Main());
    return state_;
  }

 private:
  PyThreadState* state_ = nullptr;
};

thread_local KeptState kept_state;

}  // namespace

ThreadGil::ThreadGil() {
  if (PyGILState_Check()) return;  // this thread holds it already
  PyEval_RestoreThread(kept_state.Get());
  taken_ = true;
}

ThreadGil::~ThreadGil() {
  if (taken_) PyEval_SaveThread();
}

}  // namespace dispatch::python
