#include "bench/kernel_thread_probe.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "bench/latency.h"

namespace dispatch::bench {
namespace {

// The pids of the kernel threads (children of kthreadd, pid 2) whose comm
// starts with `prefix`.
std::vector<pid_t> FindKernelThreads(const std::string& prefix) {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    std::ifstream status(std::string("/proc/") + entry->d_name + "/status");
    std::string line, name;
    long ppid = -1;
    while (std::getline(status, line)) {
      if (line.rfind("Name:\t", 0) == 0) name = line.substr(6);
      if (line.rfind("PPid:\t", 0) == 0) ppid = strtol(line.c_str() + 6, nullptr, 10);
    }
    if (ppid == 2 && name.rfind(prefix, 0) == 0) pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return pids;
}

// The thread's time on CPU so far (the first field of schedstat), in ns; 0
// if it cannot be read.
uint64_t TimeOnCpuNs(int fd) {
  char buffer[128];
  const ssize_t n = pread(fd, buffer, sizeof buffer - 1, 0);
  if (n <= 0) return 0;
  buffer[n] = '\0';
  return strtoull(buffer, nullptr, 10);
}

}  // namespace

KernelThreadProbe::KernelThreadProbe(std::string comm_prefix, uint64_t period_us, uint64_t min_ran_us)
    : period_us_(period_us == 0 ? 1 : period_us),
      min_ran_ns_(min_ran_us * 1000),
      pids_(FindKernelThreads(comm_prefix)) {
  if (!pids_.empty()) thread_ = std::thread([this]() { Run(); });
}

KernelThreadProbe::~KernelThreadProbe() {
  if (thread_.joinable()) Stop();
}

void KernelThreadProbe::Run() {
  std::vector<int> fds;
  for (pid_t pid : pids_) {
    const std::string path = "/proc/" + std::to_string(pid) + "/schedstat";
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) fds.push_back(fd);
  }
  // Polls in a row in which a thread ran make one run: a 13 ms run is seen
  // a millisecond at a time when the probe is on the other vCPU.
  std::vector<uint64_t> last(fds.size());
  std::vector<KernelThreadRun> current(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) last[i] = TimeOnCpuNs(fds[i]);
  uint64_t last_poll = MonotonicNs();
  const timespec period{0, static_cast<long>(period_us_ * 1000)};
  auto close_run = [this](KernelThreadRun& run) {
    if (run.ran_ns >= min_ran_ns_) runs_.push_back(run);
    run = KernelThreadRun{};
  };
  while (!stop_.load(std::memory_order_relaxed)) {
    nanosleep(&period, nullptr);
    const uint64_t now = MonotonicNs();
    for (size_t i = 0; i < fds.size(); ++i) {
      const uint64_t on_cpu = TimeOnCpuNs(fds[i]);
      KernelThreadRun& run = current[i];
      if (on_cpu > last[i]) {
        if (run.ran_ns == 0) run.start_ns = last_poll;
        run.end_ns = now;
        run.ran_ns += on_cpu - last[i];
      } else if (run.ran_ns > 0) {
        close_run(run);
      }
      last[i] = on_cpu;
    }
    last_poll = now;
  }
  for (KernelThreadRun& run : current) {
    if (run.ran_ns > 0) close_run(run);
  }
  for (int fd : fds) close(fd);
}

std::vector<KernelThreadRun> KernelThreadProbe::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  std::sort(runs_.begin(), runs_.end(), [](const KernelThreadRun& a, const KernelThreadRun& b) {
    return a.start_ns < b.start_ns;
  });
  return std::move(runs_);
}

}  // namespace dispatch::bench
