// HaController: what --etcd adds to the dispatcher process
// (docs/high_availability.md §3-§6). It campaigns for leadership
// (LeaderElection); while another member leads, the server is a hot standby
// whose gateway names that leader and whose StandbyFollower keeps a local
// store following the etcd journal; on winning, it brings that store to the
// journal's end (or, when the follower had not loaded yet, loads the snapshot
// in etcd, checked against the descriptor's sizes and CRC32C, and the journal
// keys after it from S+1, each group's CRC checked and sequence numbers
// running on without a gap: DataLoss naming the key otherwise:
// EtcdStateReader), has the server recover from it through the same Apply as
// a restart's replay, then serves with every commit journaled in etcd
// (EtcdJournal) and every local snapshot sent on to etcd
// (EtcdSnapshotWriter). Losing the lease, being fenced, or a failed rebuild
// stops the process with kExitLeadershipLost; the process then rejoins as a
// standby by running its binary afresh (dispatcher_main.cc), or exits with
// that code under --rejoin=false. Each member also writes its record
// (member_record.h) under PREFIX/members/, attached to its lease.
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
#include "reactor/ha/wire/snapshot_codec.h"
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
  // Tests only (DISPATCH_TEST_HA_CHECK_LIVE_STATE=1): at a hot takeover the
  // store is replayed as well and must give the standby's live state, byte
  // for byte in the snapshot encoding; a difference stops the member.
  bool test_check_live_state = false;
};

class HaController {
 public:
  HaController(uvkj::UvAsyncIo& io, reactor::DispatcherServer& server, HaOptions options);
  ~HaController();
  HaController(const HaController&) = delete;
  HaController& operator=(const HaController&) = delete;

  void Start();
  // For /metrics (set as the server's HaStatusSource by Start).
  reactor::HaStatus HaStatusNow() const;
  // A clean stop: ends the candidacy and revokes the lease, so the leader
  // key and this member's record vanish at once and a standby takes over
  // without waiting for the TTL. Waits at most `timeout` for etcd.
  kj::Promise<void> Resign(kj::Duration timeout);

 private:
  void OnGranted(int64_t lease_id);
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
  kj::Promise<void> member_put_ = nullptr;
};

}  // namespace dispatch::ha
