#include "tests/etcd/ha_group.h"

#include <signal.h>

#include <deque>
#include <fstream>
#include <stdexcept>

#include "tests/support/http_get.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {

HaGroup::HaGroup(const EtcdCluster& etcd, size_t members, std::string lease_ttl_ms,
                 std::vector<std::string> extra_flags)
    : flags_({"--etcd=" + etcd.EndpointList(), "--ha-prefix=/test/group",
              "--lease-ttl-ms=" + lease_ttl_ms, "--worker-heartbeat-interval-ms=100",
              "--log-level=info"}) {
  for (auto& flag : extra_flags) flags_.push_back(std::move(flag));
  for (size_t i = 0; i < members; ++i) {
    Member m;
    m.name = std::string(1, static_cast<char>('a' + i));
    m.address = "unix:" + dir_.File(m.name + ".sock");
    m.work_dir = dir_.File(m.name);
    members_.push_back(std::move(m));
  }
}

std::string HaGroup::LogPath(size_t i) const {
  const Member& m = members_.at(i);
  return LogPathOf(m, m.starts);
}

std::string HaGroup::LogPathOf(const Member& m, int start) const {
  return dir_.File(m.name + "." + std::to_string(start) + ".log");
}

void HaGroup::Start(size_t i) {
  Member& m = members_.at(i);
  ++m.starts;
  DispatcherProcess::Options options;
  options.listen = m.address;
  options.work_dir = m.work_dir;
  options.stderr_path = LogPath(i);
  options.extra_flags = flags_;
  m.process = std::make_unique<DispatcherProcess>(options);
  if (m.process->address() != m.address) {
    throw std::runtime_error("dispatcher " + m.name + " listens on " + m.process->address());
  }
}

void HaGroup::Kill9(size_t i) {
  Member& m = members_.at(i);
  m.process->process().Signal(SIGKILL);
  if (!m.process->process().Wait(kTestDeadline).has_value()) {
    throw std::runtime_error("dispatcher " + m.name + " did not die of SIGKILL");
  }
  m.process.reset();
}

std::vector<std::string> HaGroup::RestartExited() {
  std::vector<std::string> restarted;
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    if (m.process == nullptr) continue;
    std::optional<int> status = m.process->process().Wait(std::chrono::milliseconds(0));
    if (!status) continue;
    std::string line = "dispatcher " + m.name + " exited on its own (wait status " +
                       std::to_string(*status) + "); its log ends:\n";
    std::ifstream log(LogPath(i));
    std::deque<std::string> tail;
    for (std::string text; std::getline(log, text);) {
      tail.push_back(text);
      if (tail.size() > 15) tail.pop_front();
    }
    for (const std::string& text : tail) line += "  " + text + "\n";
    m.process.reset();
    Start(i);
    restarted.push_back(std::move(line));
  }
  return restarted;
}

std::string HaGroup::AddressList(std::vector<size_t> order) const {
  if (order.empty()) {
    for (size_t i = 0; i < members_.size(); ++i) order.push_back(i);
  }
  std::string list;
  for (size_t i : order) list += (list.empty() ? "" : ",") + members_.at(i).address;
  return list;
}

std::string HaGroup::Ready(size_t i) const {
  const Member& m = members_.at(i);
  if (m.process == nullptr) return "down";
  HttpResponse r = HttpGet(m.process->http_url(), "/readyz", "", std::chrono::seconds(5));
  return std::to_string(r.status) + " " + r.body;
}

std::string HaGroup::LogTails(size_t lines) const {
  std::string out;
  for (size_t i = 0; i < members_.size(); ++i) {
    out += "---- dispatcher " + members_[i].name + " (start " + std::to_string(members_[i].starts) +
           ", " + Ready(i) + ") " + LogPath(i) + "\n";
    std::ifstream log(LogPath(i));
    std::deque<std::string> tail;
    for (std::string line; std::getline(log, line);) {
      tail.push_back(line);
      if (tail.size() > lines) tail.pop_front();
    }
    for (const std::string& line : tail) out += line + "\n";
  }
  return out;
}

std::vector<std::string> HaGroup::LogLinesWith(const std::string& needle) const {
  std::vector<std::string> found;
  for (const Member& m : members_) {
    for (int start = 1; start <= m.starts; ++start) {
      std::ifstream log(LogPathOf(m, start));
      for (std::string line; std::getline(log, line);) {
        if (line.find(needle) != std::string::npos) found.push_back(m.name + ": " + line);
      }
    }
  }
  return found;
}

int HaGroup::Leader() const {
  for (size_t i = 0; i < members_.size(); ++i) {
    if (Ready(i).rfind("200 ", 0) == 0) return static_cast<int>(i);
  }
  return -1;
}

int HaGroup::WaitLeader(std::chrono::milliseconds deadline) const {
  int leader = -1;
  WaitUntil([&] { return (leader = Leader()) >= 0; }, deadline);
  return leader;
}

bool HaGroup::WaitStandby(size_t i, std::chrono::milliseconds deadline) const {
  return WaitUntil([&] { return Ready(i).rfind("503 standby of ", 0) == 0; }, deadline);
}

}  // namespace dispatch::testing
