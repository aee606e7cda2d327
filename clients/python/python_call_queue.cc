#include "clients/python/python_call_queue.h"

#include "clients/python/thread_gil.h"

namespace dispatch::python {

using Clock = std::chrono::steady_clock;

PythonCallQueue::PythonCallQueue() : watchdog_([this]() { Watch(); }) {}

PythonCallQueue::~PythonCallQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  watchdog_wake_.notify_all();
  watchdog_.join();
}

clients::ClosureOutput PythonCallQueue::Run(const std::function<clients::ClosureOutput()>& call) {
  Item item{&call};
  std::unique_lock<std::mutex> lock(mu_);
  queue_.push_back(&item);
  if (running_ > 0 && watchdog_idle_) watchdog_wake_.notify_one();  // to see if it waits behind a slow call
  while (!item.done) {
    if (drainers_ == 0 || item.take_over) {
      item.take_over = false;
      Drain(lock);
      continue;
    }
    item.wake.wait(lock, [&] { return item.done || item.take_over || drainers_ == 0; });
  }
  return std::move(item.output);
}

void PythonCallQueue::Drain(std::unique_lock<std::mutex>& lock) {
  ++drainers_;
  lock.unlock();
  {
    ThreadGil gil;
    const Clock::time_point start = Clock::now();
    lock.lock();
    for (int ran = 0; !queue_.empty() && ran < kMaxDrain && Clock::now() - start < kMaxHold;
         ++ran) {
      Item* next = queue_.front();
      queue_.pop_front();
      ++running_;
      progress_ = Clock::now();
      if (!queue_.empty() && watchdog_idle_) watchdog_wake_.notify_one();
      lock.unlock();
      clients::ClosureOutput output = (*next->call)();
      lock.lock();
      --running_;
      progress_ = Clock::now();
      next->output = std::move(output);
      next->done = true;
      next->wake.notify_one();
    }
    lock.unlock();
  }  // the GIL goes before mu_ is taken again
  lock.lock();
  --drainers_;
  // What is left goes to its first caller.
  if (drainers_ == 0 && !queue_.empty()) queue_.front()->wake.notify_one();
}

void PythonCallQueue::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (running_ == 0 || queue_.empty()) {
      watchdog_idle_ = true;
      watchdog_wake_.wait(lock);
      watchdog_idle_ = false;
      continue;
    }
    watchdog_wake_.wait_for(lock, kStuckAfter);
    if (running_ > 0 && !queue_.empty() && Clock::now() - progress_ >= kStuckAfter &&
        !queue_.front()->take_over) {
      queue_.front()->take_over = true;  // a call released the GIL for long: drain beside it
      queue_.front()->wake.notify_one();
    }
  }
}

}  // namespace dispatch::python
