// CPU time of processes, for benchmarks on a shared machine: wall-clock
// figures there measure the neighbours' load as much as our code, while the
// CPU a process spends per unit of work moves far less with it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dispatch::bench {

// Nanoseconds on a CPU of every live thread of `pid` (the sum of the first
// field of /proc/PID/task/*/schedstat); 0 when it cannot be read. Threads
// that already exited are not counted.
uint64_t ProcessCpuNanos(pid_t pid);
// The same for this process (CLOCK_PROCESS_CPUTIME_ID: every thread, ended
// ones included).
uint64_t SelfCpuNanos();

// A numeric field of a /proc status file (/proc/PID/status,
// /proc/PID/task/TID/status): "VmRSS" gives 123 for "VmRSS:   123 kB"; -1
// when the file or the field is missing.
long ProcStatusField(const std::string& status_path, const char* key);

// CPU of a fixed set of processes between Start() and Stop().
class CpuMeter {
 public:
  explicit CpuMeter(std::vector<pid_t> pids) : pids_(std::move(pids)) {}
  void Start();
  void Stop();
  // Per process, in the order given; and this process.
  const std::vector<uint64_t>& nanos() const { return nanos_; }
  uint64_t self_nanos() const { return self_nanos_; }
  uint64_t total_nanos(size_t first, size_t count) const;

 private:
  std::vector<pid_t> pids_;
  std::vector<uint64_t> nanos_;
  uint64_t self_nanos_ = 0;
};

}  // namespace dispatch::bench
