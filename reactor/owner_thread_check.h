// OwnerThreadCheck: binds the dispatcher's loop thread, the one thread that
// runs uv_run and owns all dispatcher state. Every RPC handler and timer
// callback checks it is on that thread and counts it when not, in release
// builds too; the count is reported in ServerStats and the tests assert it
// stays 0. (It runs no thread; clients::LoopThread is the clients' loop thread.)
#pragma once

#include <cstdint>
#include <thread>

namespace dispatch::reactor {

class OwnerThreadCheck {
 public:
  // Binds the calling thread as the loop thread.
  void Bind() { id_ = std::this_thread::get_id(); }
  // Call at the top of every handler and timer callback.
  void Check() {
    if (std::this_thread::get_id() != id_) ++violations_;
  }
  uint64_t violations() const { return violations_; }
  // A stable number for the bound thread, for reports.
  uint64_t NumericId() const { return std::hash<std::thread::id>()(id_); }

 private:
  std::thread::id id_;
  uint64_t violations_ = 0;
};

}  // namespace dispatch::reactor
