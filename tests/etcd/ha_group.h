// HaGroup: a group of real dispatchers in HA mode (--etcd) on one test etcd
// cluster, for the tests of clients and takeovers. Member i listens on a Unix
// socket of its own, so that after kill -9 it is started again at the same
// address (a freed TCP port could be taken meanwhile) with the same work dir,
// as a supervisor would: it rejoins as a standby. Its log goes to
// NAME.RESTARTS.log in the group's directory. Every wait has a deadline.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/dispatcher_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {

class HaGroup {
 public:
  // `extra_flags` go to every member after the HA flags.
  HaGroup(const EtcdCluster& etcd, size_t members, std::string lease_ttl_ms = "2000",
          std::vector<std::string> extra_flags = {});
  HaGroup(const HaGroup&) = delete;
  HaGroup& operator=(const HaGroup&) = delete;

  size_t size() const { return members_.size(); }
  // Starts member i (again, after Kill9). Throws when it never listens.
  void Start(size_t i);
  // kill -9 of member i, reaped before it returns.
  void Kill9(size_t i);
  // The supervisor's other half: members that exited on their own (a lost
  // lease with --rejoin=false, a rejoin that failed to start, a crash) are
  // reaped and started again. One line per restart: who, how it ended, and
  // the tail of its log.
  std::vector<std::string> RestartExited();
  bool Running(size_t i) const { return members_.at(i).process != nullptr; }
  const std::string& address(size_t i) const { return members_.at(i).address; }
  DispatcherProcess& process(size_t i) { return *members_.at(i).process; }
  // Every member's address, comma-separated, in the order of `order` (all
  // members in index order when empty).
  std::string AddressList(std::vector<size_t> order = {}) const;

  // Member i's /readyz: "200 ready", "503 standby of ADDRESS", ...; "down"
  // when it is not running, "0 " when it did not answer.
  std::string Ready(size_t i) const;
  // The member whose /readyz is 200, or -1.
  int Leader() const;
  // Waits for a leader; its index, or -1 at the deadline.
  int WaitLeader(std::chrono::milliseconds deadline = std::chrono::seconds(60)) const;
  // Waits until member i is a standby that names a leader.
  bool WaitStandby(size_t i, std::chrono::milliseconds deadline = std::chrono::seconds(60)) const;
  // How often member i was started.
  int starts(size_t i) const { return members_.at(i).starts; }
  std::string LogPath(size_t i) const;
  // Every line holding `needle` in any log of any member (all its starts).
  std::vector<std::string> LogLinesWith(const std::string& needle) const;
  // The last `lines` lines of every member's current log, each headed by its
  // name and /readyz: what a failing test prints.
  std::string LogTails(size_t lines = 40) const;

 private:
  struct Member {
    std::string name;
    std::string address;
    std::string work_dir;
    int starts = 0;
    std::unique_ptr<DispatcherProcess> process;
  };

  // The log of member `m`'s `start`-th start.
  std::string LogPathOf(const Member& m, int start) const;

  TempDir dir_;
  std::vector<std::string> flags_;
  std::vector<Member> members_;
};

}  // namespace dispatch::testing
