// HaController: what --etcd adds to the dispatcher process
// (docs/high_availability.md §3-§6). It campaigns for leadership
// (LeaderElection); while another member leads, the server is a cold standby
// whose gateway names that leader; on winning, it loads the snapshot in etcd
// (P/snapshot/current and its chunks, checked against the descriptor's sizes
// and CRC32C) into a fresh local store as that store's snapshot, then reads
// the journal keys after it (paged ranges of PREFIX/journal/ from S+1),
// checking each group's CRC and that sequence numbers run on from S+1
// without a gap (DataLoss naming the key otherwise), and has the server
// recover from it through the same Apply as a restart's replay, then serve
// with every commit journaled in etcd (EtcdJournal) and every local snapshot
// sent on to etcd (EtcdSnapshotWriter). Losing the lease, being fenced, or a
// failed rebuild stops the process with kExitLeadershipLost (fail-stop; a
// supervisor restarts it as a candidate).
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
#include "reactor/ha/etcd_snapshot_writer.h"
#include "reactor/ha/etcd_state_reader.h"
#include "reactor/ha/snapshot_codec.h"
#include "reactor/ha/standby_follower.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::ha {

struct HaOptions {
  std::vector<std::string> endpoints;  // --etcd
  std::string prefix = "/dispatch/default";  // --ha-prefix
  uint64_t lease_ttl_ms = 2000;        // --lease-ttl-ms
  std::string advertise;               // --advertise (the leader key's value)
  // EtcdSnapshotWriterOptions::kill_before_switch, from the environment
  // (DISPATCH_TEST_HA_SNAPSHOT_KILL_BEFORE_SWITCH): tests only.
  uint64_t test_kill_before_snapshot_switch = 0;
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

 private:
  void OnElected(int64_t leader_revision);
  void Stop(const Status& why);

  uvkj::UvAsyncIo& io_;
  reactor::DispatcherServer& server_;
  const HaOptions options_;
  std::unique_ptr<etcd::EtcdClient> client_;
  std::unique_ptr<EtcdJournal> journal_;
  std::unique_ptr<EtcdSnapshotWriter> snapshots_;
  std::unique_ptr<StandbyFollower> follower_;  // while a standby
  std::unique_ptr<etcd::LeaderElection> election_;
  kj::Promise<void> rebuild_ = nullptr;
};

}  // namespace dispatch::ha
