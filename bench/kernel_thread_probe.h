// KernelThreadProbe: when did a kernel thread of the machine run for long?
// On the VMs these benches run on, `kdamond.0` (the kernel's DAMON memory
// monitor, started by the VM's kernel, not by us) wakes every ~0.5 s and
// then holds a vCPU for 1-16 ms without being preempted, longer the more
// memory processes map: `perf sched timehist` showed every 0.5 s ping stall
// of `dispatch-bench snapshot` lined up with one of its runs while the
// dispatcher and the pinger waited behind it. This probe polls the thread's
// /proc/PID/schedstat (its time on CPU, in ns) from a thread of its own, so
// a bench can show which of its pings such a run overlapped.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace dispatch::bench {

// [start_ns, end_ns] in CLOCK_MONOTONIC: the thread ran at least `ran_ns`
// somewhere inside it.
struct KernelThreadRun {
  uint64_t start_ns = 0, end_ns = 0, ran_ns = 0;
};

class KernelThreadProbe {
 public:
  // Polls every thread whose comm starts with `comm_prefix` every
  // `period_us`; keeps the polls in which one ran at least `min_ran_us`.
  // With no such thread it records nothing (found() is false).
  KernelThreadProbe(std::string comm_prefix, uint64_t period_us = 1000, uint64_t min_ran_us = 1000);
  ~KernelThreadProbe();
  KernelThreadProbe(const KernelThreadProbe&) = delete;
  KernelThreadProbe& operator=(const KernelThreadProbe&) = delete;

  bool found() const { return !pids_.empty(); }
  // Stops polling; returns the runs seen, in order. Call once.
  std::vector<KernelThreadRun> Stop();

 private:
  void Run();

  const uint64_t period_us_, min_ran_ns_;
  std::vector<pid_t> pids_;
  std::atomic<bool> stop_{false};
  std::vector<KernelThreadRun> runs_;  // written by the probe thread, read after join
  std::thread thread_;
};

}  // namespace dispatch::bench
