// LeaderElection: one dispatcher's candidacy for leadership, with an etcd
// lease (docs/high_availability.md §3). Start() grants a lease of
// `lease_ttl_seconds` (a failed grant is tried again every keepalive period,
// on the client's next endpoint: nothing is held yet, so nothing is lost)
// and keeps it alive every TTL/3, one keepalive in
// flight; it campaigns with one transaction, "if create_revision(key) == 0
// then put key=value with the lease, else read key". The winner learns its
// leader revision (the key's create revision: the fencing token every
// journal transaction compares against); a loser is told who leads, watches
// the key, and campaigns again when it is deleted (the holder's lease expired
// or was revoked). A key read back that holds this candidate's own lease is
// its own earlier put, landed while the answer was lost (a timed-out
// request): it leads then, with that key's create revision. A watch can
// stall without ending (seen once under heavy load), so a loser also reads
// the key once per TTL and campaigns when it is gone or belongs to another
// holder than the one it follows.
// Leadership (and candidacy) ends for good, with `lost` called once, when
//  - a keepalive answer has no TTL: the lease is gone (etcd says so only thus);
//  - no keepalive succeeded for TTL minus one keepalive period, measured on
//    this process's monotonic clock from when the last successful one was
//    sent, so this side gives up before etcd can expire the lease: a timer of
//    its own, whatever the keepalive in flight does (etcd may never answer),
//    and a process stopped by SIGSTOP notices as soon as it runs again. Each
//    keepalive may take at most a period.
// Whoever gets `lost` must stop serving at once: another may already lead.
// It never rejoins by itself: its owner starts afresh (the dispatcher runs
// its own binary again, dispatcher_main.cc). Resign() ends it on purpose
// (a clean stop): the lease is revoked, so etcd deletes the leader key at
// once and a standby need not wait for the TTL.
// REQUIRES: loop thread only; not destroyed from inside one of its callbacks;
// the client outlives it.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "reactor/etcd/etcd_client.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::etcd {

struct LeaderElectionOptions {
  std::string key;    // e.g. "PREFIX/leader"
  std::string value;  // this member's record (its address)
  // etcd raises a TTL below 1.5 x its election timeout (to 2 s at its
  // defaults); the keepalives then follow the TTL it granted.
  int64_t lease_ttl_seconds = 2;
};

struct LeaderElectionCallbacks {
  // The lease was granted (before the first campaign): keys this member
  // attaches to it vanish with it. Optional.
  std::function<void(int64_t lease_id)> granted;
  // This member leads; `leader_revision` is the leader key's create revision.
  std::function<void(int64_t leader_revision)> elected;
  // Another member leads (each time a campaign finds one).
  std::function<void(const KeyValue& leader)> following;
  // Candidacy and any leadership are over, for the reason given.
  std::function<void(const Status& why)> lost;
  // Awaited before each campaign: resolves when this member may lead at
  // once. A standby still loading the journal holds its campaign back, so
  // that a caught-up standby wins the race and the takeover needs no load.
  // A rejection counts as ready. Optional.
  std::function<kj::Promise<void>()> ready_to_lead;
};

struct LeaderElectionCounters {
  uint64_t campaigns = 0;
  uint64_t keepalives_ok = 0;
  uint64_t keepalives_failed = 0;  // no answer or an error (not "gone")
  uint64_t grants_failed = 0;      // lease grants tried again (no lease is held yet)
};

class LeaderElection {
 public:
  LeaderElection(uvkj::UvAsyncIo& io, EtcdClient& client, LeaderElectionOptions options,
                 LeaderElectionCallbacks callbacks);
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  void Start();
  // Ends candidacy and leadership without calling `lost`: no keepalive or
  // campaign follows, and the lease is revoked (best effort: resolves with
  // etcd's answer, or Unavailable; a lease never granted is not revoked).
  kj::Promise<Status> Resign();

  bool leading() const { return leading_; }
  bool lost() const { return lost_; }
  int64_t leader_revision() const { return leader_revision_; }
  int64_t lease_id() const { return lease_id_; }
  const LeaderElectionCounters& counters() const { return counters_; }
  // The TTL etcd granted (0 before the grant).
  int64_t granted_ttl_seconds() const { return lease_id_ != 0 ? ttl_seconds_ : 0; }

 private:
  kj::Duration Period() const;
  kj::Promise<void> Grant();
  kj::Duration Budget() const;
  kj::Promise<void> KeepAliveLoop();
  kj::Promise<void> WatchDeadline();
  void Campaign();
  kj::Promise<void> CampaignOnce();
  kj::Promise<void> CampaignNow();
  // Won: leads with `leader_revision`, the leader key's create revision.
  void Lead(int64_t leader_revision);
  void Follow(const KeyValue& leader, int64_t from_revision);
  // While following: every TTL, the leader key against the one followed.
  kj::Promise<void> CheckLeaderKey();
  void Lose(Status why);

  uvkj::UvAsyncIo& io_;
  EtcdClient& client_;
  const LeaderElectionOptions options_;
  const LeaderElectionCallbacks callbacks_;
  LeaderElectionCounters counters_;
  int64_t lease_id_ = 0;
  int64_t ttl_seconds_;  // the TTL etcd granted (at least the one asked for)
  int64_t leader_revision_ = 0;
  bool following_ = false;         // since Follow(), until the next campaign
  int64_t followed_revision_ = 0;  // the followed holder's create revision
  bool leading_ = false;
  bool lost_ = false;
  bool started_ = false;
  kj::TimePoint last_ok_sent_;
  kj::Promise<void> start_ = nullptr;
  kj::Promise<void> keepalive_ = nullptr;
  kj::Promise<void> deadline_ = nullptr;
  kj::Promise<void> campaign_ = nullptr;
  kj::Promise<void> leader_check_ = nullptr;
  std::unique_ptr<EtcdWatch> watch_;
  // Watches replaced from inside their own callback wait here for the next turn.
  kj::Promise<void> retire_ = nullptr;
};

}  // namespace dispatch::etcd
