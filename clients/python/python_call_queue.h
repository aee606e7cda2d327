// PythonCallQueue: runs the Python calls of many executor threads while
// taking the GIL rarely. Each executor thread that calls into Python on its
// own contends for the GIL, and CPython hands the GIL over with a forced
// context switch per hand-off: measured here, 64 slots of no-op closures ran
// at about a quarter of the C++ workers' rate. Here the calls queue instead;
// one thread (a "drainer", one of the callers) takes the GIL once and runs
// queued calls in order, for at most kMaxDrain calls or kMaxHold, then lets
// the next caller take over. When a call holds its drainer longer than
// kStuckAfter (it released the GIL: sleep, I/O, numpy), a waiting caller
// becomes a second drainer, so slow calls still run side by side.
// No lock is held while Python runs; the GIL is never taken with mu_ held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "clients/closure_function.h"

namespace dispatch::python {

class PythonCallQueue {
 public:
  static constexpr int kMaxDrain = 256;
  static constexpr std::chrono::microseconds kMaxHold{2000};
  static constexpr std::chrono::microseconds kStuckAfter{1000};

  PythonCallQueue();
  // Waits for the callers' calls to end. REQUIRES: no Run() is still to come.
  ~PythonCallQueue();
  PythonCallQueue(const PythonCallQueue&) = delete;
  PythonCallQueue& operator=(const PythonCallQueue&) = delete;

  // Runs `call` (which needs the GIL) and returns what it returned.
  // REQUIRES: the calling thread does not hold the GIL.
  clients::ClosureOutput Run(const std::function<clients::ClosureOutput()>& call);

 private:
  struct Item {
    const std::function<clients::ClosureOutput()>* call;
    clients::ClosureOutput output = clients::ClosureOutput::Result("");
    bool done = false;
    bool take_over = false;  // the watchdog asks this caller to drain too
    std::condition_variable wake;  // only its caller waits on it
  };

  // Takes the GIL and runs queued items. Called and returns with `lock` held.
  void Drain(std::unique_lock<std::mutex>& lock);
  // Asks the first waiting caller to drain when the drainers are stuck.
  void Watch();

  std::mutex mu_;  // guards everything below
  std::deque<Item*> queue_;
  int drainers_ = 0;
  int running_ = 0;  // items being run by drainers now
  std::chrono::steady_clock::time_point progress_;  // the latest item start or end
  bool watchdog_idle_ = false;
  bool stopping_ = false;
  std::condition_variable watchdog_wake_;
  std::thread watchdog_;  // started last
};

}  // namespace dispatch::python
