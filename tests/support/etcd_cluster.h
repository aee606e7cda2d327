// EtcdCluster: real etcd members (Debian's etcd-server) for the HA tests,
// 1 or 3 of them, on free loopback ports chosen by the OS (never 2379/2380,
// which a system etcd may hold), each with its own data dir in a TempDir and
// its log in a file there. Start() waits for every member's /health with a
// deadline (polling, never sleeping in place of a check); the destructor
// kills and reaps them all. Members can be killed (kill -9) one by one.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {

struct EtcdClusterOptions {
  int members = 1;
  // etcd's raft timing; etcd's defaults (100 / 1000) make the smallest lease
  // TTL 2 s. Lower values make leases and elections faster but misfire on a
  // loaded 2-core machine.
  int heartbeat_interval_ms = 100;
  int election_timeout_ms = 1000;
  std::chrono::milliseconds start_deadline{60000};
};

class EtcdCluster {
 public:
  explicit EtcdCluster(EtcdClusterOptions options = {});
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // True when `etcd` is installed (tests skip with a message when not).
  static bool Available();

  // Starts every member and waits until each answers /health. On failure
  // returns false with `error()` saying why (the members' log tails included);
  // a port taken meanwhile by someone else is retried with fresh ports.
  bool Start();

  // "http://127.0.0.1:PORT" of each member's client URL.
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // Comma-separated endpoints.
  std::string EndpointList() const;
  const std::string& error() const { return error_; }

  // kill -9 of one member, reaped before it returns.
  void Kill(int member);
  bool Running(int member) const;
  // etcdctl (Debian etcd-client) against every member: its output (stderr
  // included), or "exit: OUTPUT" when it failed.
  std::string Etcdctl(const std::vector<std::string>& args) const;
  // The member that is raft's leader now, by etcdctl's endpoint status
  // (Debian etcd-client); -1 when none answers as leader or etcdctl is
  // missing.
  int Leader() const;
  // Any signal, e.g. SIGSTOP / SIGCONT (a member that stops answering).
  void Signal(int member, int signum) { members_.at(member)->Signal(signum); }

 private:
  bool StartOnce(std::string* why);
  bool Healthy(int member) const;
  std::string LogTail(int member) const;
  void StopAll();

  const EtcdClusterOptions options_;
  TempDir dir_;
  int attempt_ = 0;
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<Subprocess>> members_;
  std::string error_;
};

}  // namespace dispatch::testing
