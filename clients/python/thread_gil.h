// ThreadGil: holds the GIL on a thread that C++ started (an executor or the
// worker agent's thread) without making and unmaking a Python thread state
// each time. pybind11's gil_scoped_acquire gives such a thread a new state
// for every hold and deletes it after; CPython 3.11 then maps a frame stack
// for the state's first call and unmaps it on delete, and each unmap
// interrupts every CPU the process runs on. Measured on a 2-vCPU VM: about
// 90 us per Python closure, ten times the Python work of a no-op closure.
// Here a thread keeps the state it got at its first hold until it exits.
// Nested holds (the thread holds the GIL already) do nothing; threads that
// Python started use their own state.
#pragma once

#include <pybind11/pybind11.h>

namespace dispatch::python {

class ThreadGil {
 public:
  ThreadGil();
  ~ThreadGil();
  ThreadGil(const ThreadGil&) = delete;
  ThreadGil& operator=(const ThreadGil&) = delete;

 private:
  bool taken_ = false;
};

}  // namespace dispatch::python
