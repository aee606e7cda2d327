#include "tests/support/etcd_cluster.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/http_get.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {
namespace {

constexpr const char* kEtcdBinary = "/usr/bin/etcd";

// A loopback port the OS had free a moment ago (never 2379/2380). etcd binds
// it later, so another process may take it meanwhile: Start() retries.
int FreeLoopbackPort() {
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    int port = -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    ::close(fd);
    if (port != 2379 && port != 2380) return port;
  }
}

}  // namespace

EtcdCluster::EtcdCluster(EtcdClusterOptions options) : options_(options) {}

EtcdCluster::~EtcdCluster() { StopAll(); }

bool EtcdCluster::Available() { return ::access(kEtcdBinary, X_OK) == 0; }

std::string EtcdCluster::EndpointList() const {
  std::string list;
  for (const auto& e : endpoints_) list += (list.empty() ? "" : ",") + e;
  return list;
}

void EtcdCluster::StopAll() {
  for (auto& m : members_) {
    if (m && m->running()) {
      m->Signal(SIGKILL);
      m->Wait(std::chrono::seconds(10));
    }
  }
  members_.clear();
}

void EtcdCluster::Kill(int member) {
  auto& m = members_.at(member);
  if (!m->running()) return;
  m->Signal(SIGKILL);
  m->Wait(std::chrono::seconds(10));
}

bool EtcdCluster::Running(int member) const { return members_.at(member)->running(); }

bool EtcdCluster::Healthy(int member) const {
  try {
    HttpResponse r = HttpGet(endpoints_[member] + "/", "/health", "", std::chrono::seconds(2));
    return r.status == 200 && r.body.find("\"health\":\"true\"") != std::string::npos;
  } catch (const std::exception&) {
    return false;  // not listening yet
  }
}

std::string EtcdCluster::LogTail(int member) const {
  std::ifstream in(dir_.File("attempt" + std::to_string(attempt_) + "-m" + std::to_string(member) + ".log"));
  std::stringstream all;
  all << in.rdbuf();
  std::string text = all.str();
  return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
}

bool EtcdCluster::StartOnce(std::string* why) {
  ++attempt_;
  const int n = options_.members;
  std::vector<int> client_ports, peer_ports;
  std::string initial_cluster;
  endpoints_.clear();
  for (int i = 0; i < n; ++i) {
    client_ports.push_back(FreeLoopbackPort());
    peer_ports.push_back(FreeLoopbackPort());
    endpoints_.push_back("http://127.0.0.1:" + std::to_string(client_ports[i]));
    initial_cluster += (i ? "," : "") + std::string("m") + std::to_string(i) +
                       "=http://127.0.0.1:" + std::to_string(peer_ports[i]);
  }
  const std::string token = "dispatch-test-" + std::to_string(::getpid()) + "-" + std::to_string(attempt_);
  for (int i = 0; i < n; ++i) {
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_ports[i]);
    const std::string data = dir_.File("attempt" + std::to_string(attempt_) + "-m" + std::to_string(i));
    std::vector<std::string> argv = {
        kEtcdBinary,
        "--name=m" + std::to_string(i),
        "--data-dir=" + data,
        "--listen-client-urls=" + endpoints_[i],
        "--advertise-client-urls=" + endpoints_[i],
        "--listen-peer-urls=" + peer,
        "--initial-advertise-peer-urls=" + peer,
        "--initial-cluster=" + initial_cluster,
        "--initial-cluster-state=new",
        "--initial-cluster-token=" + token,
        "--heartbeat-interval=" + std::to_string(options_.heartbeat_interval_ms),
        "--election-timeout=" + std::to_string(options_.election_timeout_ms),
        // The WAL and raft log are trimmed only at etcd snapshots (see the note).
        "--snapshot-count=10000",
    };
    members_.push_back(std::make_unique<Subprocess>(argv, data + ".log"));
  }
  bool exited = false;
  const bool settled = WaitUntil(
      [&] {
        for (int i = 0; i < n; ++i) {
          if (members_[i]->Wait(std::chrono::milliseconds(0))) exited = true;
        }
        if (exited) return true;  // no use waiting: it will not come up
        for (int i = 0; i < n; ++i) {
          if (!Healthy(i)) return false;
        }
        return true;
      },
      options_.start_deadline);
  if (settled && !exited) return true;
  std::ostringstream out;
  out << "etcd cluster of " << n << " did not become healthy within "
      << options_.start_deadline.count() << " ms";
  for (int i = 0; i < n; ++i) {
    out << "\n--- member m" << i << (members_[i]->running() ? " (running)" : " (exited)") << ", log tail:\n"
        << LogTail(i);
  }
  *why = out.str();
  StopAll();
  return false;
}

bool EtcdCluster::Start() {
  if (!Available()) {
    error_ = std::string(kEtcdBinary) + " is not installed (Debian etcd-server; scripts/bootstrap.sh)";
    return false;
  }
  std::string why;
  for (int i = 0; i < 3; ++i) {
    // A member that exited at once lost a race for its port: try fresh ports.
    if (StartOnce(&why)) return true;
    if (why.find("address already in use") == std::string::npos) break;
  }
  error_ = why;
  return false;
}

std::string EtcdCluster::Etcdctl(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"/bin/sh", "-c", "ETCDCTL_API=3 exec \"$0\" \"$@\" 2>&1",
                                   "/usr/bin/etcdctl", "--endpoints=" + EndpointList()};
  for (const auto& a : args) argv.push_back(a);
  Subprocess process(argv);
  std::string out;
  while (auto line = process.ReadLine(kTestDeadline)) out += *line + "\n";
  auto status = process.Wait(kTestDeadline);
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) return "exit: " + out;
  return out;
}

int EtcdCluster::Leader() const {
  if (access("/usr/bin/etcdctl", X_OK) != 0) return -1;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (!Running(static_cast<int>(i))) continue;
    // One line per endpoint: "ENDPOINT, ID, VERSION, SIZE, IS LEADER, ...".
    Subprocess etcdctl({"/bin/sh", "-c", "ETCDCTL_API=3 exec /usr/bin/etcdctl \"$@\" 2>/dev/null", "etcdctl",
                        "--endpoints=" + endpoints_[i], "--command-timeout=2s", "endpoint", "status"});
    std::string out;
    while (auto line = etcdctl.ReadLine(std::chrono::seconds(5))) out += *line;
    etcdctl.Wait(std::chrono::seconds(5));
    std::vector<std::string> fields;
    std::stringstream row(out);
    std::string field;
    while (std::getline(row, field, ',')) {
      const size_t start = field.find_first_not_of(' ');
      fields.push_back(start == std::string::npos ? "" : field.substr(start));
    }
    if (fields.size() > 4 && fields[4] == "true") return static_cast<int>(i);
  }
  return -1;
}

}  // namespace dispatch::testing
