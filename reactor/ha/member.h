// HaMember: a dispatcher process in HA mode (--etcd; docs/high_availability.md
// §3-§6), the one seam between HA and the dispatcher: the server behind it
// knows nothing of etcd. It owns the process's Frontend (the RPC listener and
// the HTTP endpoints, bound once, so a standby's /readyz and /metrics answer
// on the ports it will serve on as leader) and the role:
//  - candidate and standby: the gateway answers every authenticate with
//    "not the leader; the leader is ADDRESS" (NotLeaderError), /readyz says
//    "standby of ADDRESS", /metrics shows the candidacy (HaStatus); once the
//    leader is known, a StandbyFollower fills a local store in
//    WORK_DIR/ha-cache from etcd and follows the journal into it and into a
//    live DispatcherState;
//  - leader: on winning (LeaderElection), it brings that store to the
//    journal's end (or, when the follower had not loaded yet, loads the
//    snapshot in etcd and the journal after it: EtcdStateReader), then builds
//    the DispatcherServer behind the same Frontend from that store and live
//    state, with the etcd journal (EtcdJournal) as a durability stage of its
//    commit pipeline and every local snapshot sent on to etcd
//    (EtcdSnapshotWriter).
// Losing the lease, being fenced, or a failed rebuild stops the process at
// once with kExitLeadershipLost, acknowledging nothing more; the process then
// rejoins as a standby by running its binary afresh (dispatcher_main.cc), or
// exits with that code under --rejoin=false. Each member also writes its
// record (member_record.h) under PREFIX/members/, attached to its lease.
// REQUIRES: loop thread only.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reactor/dispatcher_server.h"
#include "reactor/etcd/etcd_client.h"
#include "reactor/etcd/leader_election.h"
#include "reactor/frontend.h"
#include "reactor/ha/etcd_journal.h"
#include "reactor/ha/etcd_snapshot_writer.h"
#include "reactor/ha/ha_status.h"
#include "reactor/ha/standby_follower.h"
#include "reactor/uvkj/async_io.h"
#include "storage/store.h"

namespace dispatch::ha {

struct HaOptions {
  std::vector<std::string> endpoints;        // --etcd
  std::string prefix = "/dispatch/default";  // --ha-prefix
  uint64_t lease_ttl_ms = 2000;              // --lease-ttl-ms
  std::string advertise;  // --advertise (the leader key's value); empty: the bound --listen
  // EtcdSnapshotWriterOptions::kill_before_switch, from the environment
  // (DISPATCH_TEST_HA_SNAPSHOT_KILL_BEFORE_SWITCH): tests only.
  uint64_t test_kill_before_snapshot_switch = 0;
  // Tests only (DISPATCH_TEST_HA_CHECK_LIVE_STATE=1): at a hot takeover the
  // store is replayed as well and must give the standby's live state, byte
  // for byte in the snapshot encoding; a difference stops the member.
  bool test_check_live_state = false;
};

class HaMember final : private reactor::Gate {
 public:
  // `options`: the server's, with HA mode's limits applied (ApplyHaLimits).
  HaMember(uvkj::UvAsyncIo& io, reactor::DispatcherOptions options, HaOptions ha);
  ~HaMember() noexcept(false);
  HaMember(const HaMember&) = delete;
  HaMember& operator=(const HaMember&) = delete;

  // Binds the listen and HTTP addresses as a standby and starts the
  // campaign (which runs with the loop); returns the address bound.
  Result<std::string> Start();
  const std::string& http_url() const { return front_->http_url(); }
  // Graceful shutdown: the server's when leading, else the standby's
  // (replies drained, the loop stopped). Idempotent.
  void BeginShutdown(const char* why);
  // 0 after a clean stop; kExitLeadershipLost once the role ended.
  int exit_code() const;
  // A clean stop: ends the candidacy and revokes the lease, so the leader
  // key and this member's record vanish at once and a standby takes over
  // without waiting for the TTL. Waits at most `timeout` for etcd.
  kj::Promise<void> Resign(kj::Duration timeout);
  // Null unless leading.
  reactor::DispatcherServer* server() { return server_.get(); }

 private:
  // The standby's gate: closed, naming the leader.
  Status Open() const override { return NotLeaderError(); }
  rpc::Dispatcher::Client Admit(reactor::RpcServer::ConnectionId id) override;
  // What the gateway answers while this member does not lead.
  Status NotLeaderError() const;

  void AddStandbyRoutes();
  // For /metrics: the member's candidacy and, as a standby, its follower.
  HaStatus HaStatusNow() const;
  // Empties WORK_DIR/ha-cache (the local copy of the etcd journal, rebuilt
  // at every start) and opens a store there, with HA mode's limits.
  Result<storage::Store*> OpenStore();
  void OnFollowing(const etcd::KeyValue& leader);
  void OnGranted(int64_t lease_id);
  void OnElected(int64_t leader_revision);
  // The store is filled: serve from it (and from the follower's live state).
  void Lead(int64_t leader_revision, uint64_t elected_ns);
  // The role ended (leadership lost, fenced, a failed rebuild or load).
  void Stop(const Status& why);

  uvkj::UvAsyncIo& io_;
  const reactor::DispatcherOptions options_;
  const HaOptions ha_;
  // Declared first: outlives every part that serves behind it.
  std::unique_ptr<reactor::Frontend> front_;
  std::string advertise_;   // ha_.advertise, or the bound address
  std::string standby_of_;  // the leader's address, when known
  bool shutting_down_ = false;
  int exit_code_ = 0;
  std::unique_ptr<storage::Store> store_;  // until the server takes it
  std::unique_ptr<etcd::EtcdClient> client_;
  std::unique_ptr<EtcdJournal> journal_;
  std::unique_ptr<EtcdSnapshotWriter> snapshots_;
  std::unique_ptr<StandbyFollower> follower_;  // while a standby
  std::unique_ptr<etcd::LeaderElection> election_;
  kj::Promise<void> rebuild_ = nullptr;
  kj::Promise<void> member_put_ = nullptr;
  kj::Promise<void> shutdown_ = nullptr;
  // Last: destroyed first (its journal is a stage of journal_, its routes
  // and gate are on front_).
  std::unique_ptr<reactor::DispatcherServer> server_;
};

}  // namespace dispatch::ha
