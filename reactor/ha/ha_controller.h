// HaController: what --etcd adds to the dispatcher process
// (docs/high_availability.md §3, §4, §6, first version). It campaigns for
// leadership (LeaderElection); while another member leads, the server is a
// standby whose gateway names that leader; on winning, it reads the whole
// journal from etcd (paged ranges of PREFIX/journal/) into a fresh local store,
// checking each group's CRC and that sequence numbers run on without a gap
// (DataLoss naming the key otherwise), and has the server recover from it
// through the same Apply as a restart's replay, then serve with every commit
// journaled in etcd (EtcdJournal). Losing the lease, being fenced, or a
// failed rebuild stops the process with kExitLeadershipLost; the process
// then rejoins as a standby by running its binary afresh (dispatcher_main.cc),
// or exits with that code under --rejoin=false. Each member also writes its
// record (member_record.h) under PREFIX/members/, attached to its lease.
// REQUIRES: loop thread only; the server outlives it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kj/async.h>

#include "reactor/dispatcher_server.h"
#include "reactor/etcd/etcd_client.h"
#include "reactor/etcd/leader_election.h"
#include "reactor/ha/etcd_journal.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::ha {

struct HaOptions {
  std::vector<std::string> endpoints;  // --etcd
  std::string prefix = "/dispatch/default";  // --ha-prefix
  uint64_t lease_ttl_ms = 2000;        // --lease-ttl-ms
  std::string advertise;               // --advertise (the leader key's value)
};

// Splits --etcd's comma-separated list; InvalidArgument naming a bad entry.
Result<std::vector<std::string>> ParseEtcdEndpoints(const std::string& list);

class HaController {
 public:
  HaController(uvkj::UvAsyncIo& io, reactor::DispatcherServer& server, HaOptions options);
  ~HaController();
  HaController(const HaController&) = delete;
  HaController& operator=(const HaController&) = delete;

  void Start();
  // A clean stop: ends the candidacy and revokes the lease, so the leader
  // key and this member's record vanish at once and a standby takes over
  // without waiting for the TTL. Waits at most `timeout` for etcd.
  kj::Promise<void> Resign(kj::Duration timeout);

 private:
  void OnGranted(int64_t lease_id);
  void OnElected(int64_t leader_revision);
  kj::Promise<void> ReadJournal(storage::Store& store, std::string from);
  void Stop(const Status& why);

  uvkj::UvAsyncIo& io_;
  reactor::DispatcherServer& server_;
  const HaOptions options_;
  std::unique_ptr<etcd::EtcdClient> client_;
  std::unique_ptr<EtcdJournal> journal_;
  std::unique_ptr<etcd::LeaderElection> election_;
  uint64_t groups_read_ = 0;
  kj::Promise<void> rebuild_ = nullptr;
  kj::Promise<void> member_put_ = nullptr;
};

}  // namespace dispatch::ha
