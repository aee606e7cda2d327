// ClosureExecutor: a fixed pool of threads that run closure functions off the
// agent loop, so a function that sleeps or computes for minutes never delays
// a heartbeat. Jobs run in submission order, at most `threads` at a time.
// Stop() wakes every SleepFor() early, drops jobs not yet started and joins
// the threads: a function that ignores stopping() delays Stop() until it
// returns.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dispatch::clients {

class ClosureExecutor {
 public:
  // REQUIRES: threads > 0. Threads start lazily, at the first Submit().
  explicit ClosureExecutor(uint32_t threads) : max_threads_(threads) {}
  ~ClosureExecutor() { Stop(); }
  ClosureExecutor(const ClosureExecutor&) = delete;
  ClosureExecutor& operator=(const ClosureExecutor&) = delete;

  // Any thread. Returns false (and drops the job) once stopping.
  bool Submit(std::function<void()> job);
  // Idempotent. REQUIRES: not on an executor thread.
  void Stop();

  bool stopping() const;
  // Waits up to `duration` or until Stop() or `*cancelled` (when given, and
  // followed by WakeSleepers()); false when woken early.
  bool SleepFor(std::chrono::milliseconds duration,
                const std::atomic<bool>* cancelled = nullptr) const;
  // Wakes every SleepFor() to look at its `cancelled` flag again.
  void WakeSleepers() const;

 private:
  void ThreadMain();

  const uint32_t max_threads_;
  mutable std::mutex mu_;  // guards everything below
  std::condition_variable work_;                // idle threads wait for jobs
  mutable std::condition_variable sleepers_;  // SleepFor() waits for Stop() or a cancel
  bool stopping_ = false;
  std::deque<std::function<void()>> jobs_;
  uint32_t idle_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace dispatch::clients
