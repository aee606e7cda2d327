#include "bench/process_cpu.h"

#include <dirent.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace dispatch::bench {

uint64_t ProcessCpuNanos(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* tasks = opendir(dir.c_str());
  if (tasks == nullptr) return 0;
  uint64_t total = 0;
  while (dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    FILE* f = fopen((dir + "/" + entry->d_name + "/schedstat").c_str(), "r");
    if (f == nullptr) continue;
    unsigned long long on_cpu = 0;
    if (fscanf(f, "%llu", &on_cpu) == 1) total += on_cpu;
    fclose(f);
  }
  closedir(tasks);
  return total;
}

long ProcStatusField(const std::string& status_path, const char* key) {
  std::ifstream in(status_path);
  const size_t length = strlen(key);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > length && line.compare(0, length, key) == 0 && line[length] == ':') {
      return std::stol(line.substr(length + 1));
    }
  }
  return -1;
}

uint64_t SelfCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void CpuMeter::Start() {
  nanos_.clear();
  for (pid_t pid : pids_) nanos_.push_back(ProcessCpuNanos(pid));
  self_nanos_ = SelfCpuNanos();
}

void CpuMeter::Stop() {
  for (size_t i = 0; i < pids_.size(); ++i) nanos_[i] = ProcessCpuNanos(pids_[i]) - nanos_[i];
  self_nanos_ = SelfCpuNanos() - self_nanos_;
}

uint64_t CpuMeter::total_nanos(size_t first, size_t count) const {
  uint64_t total = 0;
  for (size_t i = first; i < first + count && i < nanos_.size(); ++i) total += nanos_[i];
  return total;
}

}  // namespace dispatch::bench
