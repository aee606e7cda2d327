// Closure functions: what a worker registers by name and runs when the
// dispatcher pushes a closure. A function gets the closure's argument bytes,
// the results of its input closures (ScheduleOptions.inputs) and this
// worker's components of the per-worker resources it lists, and returns
// result bytes or an error whose kind decides what the dispatcher does next
// (a user error is final; transient and unavailable ones are retried
// elsewhere). Functions may run on executor threads, several at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dispatch::clients {

class ClosureOutput {
 public:
  enum class Kind { kResult, kUserError, kTransientError, kUnavailable };

  static ClosureOutput Result(std::string bytes) { return {Kind::kResult, std::move(bytes)}; }
  // The function failed: not retried; it becomes the coordinator's error.
  static ClosureOutput UserError(std::string message) {
    return {Kind::kUserError, std::move(message)};
  }
  // A failure another attempt may not see (a flaky dependency): retried up to
  // the dispatcher's transient limit before it counts as an error.
  static ClosureOutput TransientError(std::string message) {
    return {Kind::kTransientError, std::move(message)};
  }
  // This worker cannot run closures now: retried on another worker.
  static ClosureOutput Unavailable(std::string message) {
    return {Kind::kUnavailable, std::move(message)};
  }

  Kind kind() const { return kind_; }
  bool ok() const { return kind_ == Kind::kResult; }
  // The result bytes, or the error message.
  const std::string& data() const { return data_; }
  std::string& mutable_data() { return data_; }

 private:
  ClosureOutput(Kind kind, std::string data) : kind_(kind), data_(std::move(data)) {}
  Kind kind_;
  std::string data_;
};

// What one call of a function sees. Valid only during the call.
class ClosureCall {
 public:
  virtual ~ClosureCall() = default;
  virtual std::string_view args() const = 0;
  // This worker's component of each resource the closure lists, in order.
  virtual const std::vector<std::string>& resources() const = 0;
  // The result of each input closure the closure lists, in order (the
  // dispatcher sends them with the assignment).
  virtual const std::vector<std::string>& inputs() const = 0;
  // The worker's own address (as it registered).
  virtual const std::string& worker_address() const = 0;
  // Waits up to `duration`; returns false early when the worker is stopping
  // or the closure was cancelled (or timed out) at the dispatcher, so a long
  // function can give up instead of holding up the shutdown or a slot.
  virtual bool SleepFor(std::chrono::milliseconds duration) const = 0;
  virtual bool stopping() const = 0;
  // The dispatcher cancelled this closure, or its deadline passed
  // (WorkerControl.cancelClosures): whatever it returns now is ignored.
  virtual bool cancelled() const { return false; }
};

using ClosureFunction = std::function<ClosureOutput(const ClosureCall&)>;

struct ClosureFunctionOptions {
  // Run on the agent's loop thread instead of an executor thread: for
  // functions that return in microseconds (no I/O, no waiting), where a
  // thread hop would cost more than the call. A slow inline function stalls
  // heartbeats, so anything that may block must leave this false.
  bool run_inline = false;
};

struct RegisteredFunction {
  ClosureFunction function;
  ClosureFunctionOptions options;
};
// The functions a worker runs, by name (the names go into its heartbeats).
using FunctionRegistry = std::map<std::string, RegisteredFunction>;

}  // namespace dispatch::clients
