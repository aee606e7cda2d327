#include "reactor/etcd/leader_election.h"

#include <kj/debug.h>

#include "common/log.h"

namespace dispatch::etcd {

LeaderElection::LeaderElection(uvkj::UvAsyncIo& io, EtcdClient& client, LeaderElectionOptions options,
                               LeaderElectionCallbacks callbacks)
    : io_(io),
      client_(client),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      ttl_seconds_(options_.lease_ttl_seconds),
      last_ok_sent_(io.timer().now()) {
  KJ_REQUIRE(options_.lease_ttl_seconds >= 1, "a lease TTL of at least one second");
}

LeaderElection::~LeaderElection() {
  // Promises first: their continuations refer to this object and the watch.
  start_ = nullptr;
  keepalive_ = nullptr;
  deadline_ = nullptr;
  campaign_ = nullptr;
  leader_check_ = nullptr;
  retire_ = nullptr;
  watch_.reset();
}

kj::Duration LeaderElection::Period() const { return ttl_seconds_ * kj::SECONDS / 3; }

void LeaderElection::Start() {
  KJ_REQUIRE(!started_, "LeaderElection started twice");
  started_ = true;
  start_ = Grant().eagerlyEvaluate(nullptr);
}

kj::Promise<void> LeaderElection::Grant() {
  // Nothing is held before the grant, so nothing can be lost: a grant that
  // fails (the endpoint is down, etcd has no leader yet) is tried again a
  // keepalive period later, on the client's next endpoint. Giving up here
  // would make every candidate whose first endpoint died stop at start.
  return client_.LeaseGrant(options_.lease_ttl_seconds).then([this](Result<Lease> lease) -> kj::Promise<void> {
    if (lost_) return kj::READY_NOW;
    if (!lease.ok()) {
      ++counters_.grants_failed;
      Log(LogLevel::kWarning, "etcd lease grant failed (trying again): ", lease.status().ToString());
      return io_.timer().afterDelay(Period()).then([this]() { return Grant(); });
    }
    lease_id_ = lease->id;
    // etcd may grant more than was asked (at its default timing anything
    // under 1.5 s of election timeout becomes 2 s): pace the keepalives and
    // the deadline by the TTL etcd will really enforce.
    ttl_seconds_ = std::max(options_.lease_ttl_seconds, lease->ttl_seconds);
    last_ok_sent_ = io_.timer().now();
    if (callbacks_.granted) callbacks_.granted(lease_id_);
    keepalive_ = KeepAliveLoop().eagerlyEvaluate(nullptr);
    deadline_ = WatchDeadline().eagerlyEvaluate(nullptr);
    Campaign();
    return kj::READY_NOW;
  });
}

kj::Duration LeaderElection::Budget() const {
  return ttl_seconds_ * kj::SECONDS - Period();
}

kj::Promise<void> LeaderElection::WatchDeadline() {
  // Independent of the keepalive in flight: a keepalive etcd never answers
  // must not keep this side leading past its budget.
  return io_.timer().atTime(last_ok_sent_ + Budget()).then([this]() -> kj::Promise<void> {
    if (lost_) return kj::READY_NOW;
    const kj::Duration since = io_.timer().now() - last_ok_sent_;
    if (since >= Budget()) {
      Lose(UnavailableError("no keepalive of lease " + std::to_string(lease_id_) + " succeeded for " +
                            std::to_string(since / kj::MILLISECONDS) + " ms (budget " +
                            std::to_string(Budget() / kj::MILLISECONDS) + " ms)"));
      return kj::READY_NOW;
    }
    return WatchDeadline();  // a keepalive succeeded meanwhile: the deadline moved
  });
}

kj::Promise<void> LeaderElection::KeepAliveLoop() {
  return io_.timer().afterDelay(Period()).then([this]() -> kj::Promise<void> {
    if (lost_) return kj::READY_NOW;
    const kj::TimePoint sent = io_.timer().now();
    // One keepalive in flight, for at most a period: unanswered, the client
    // sends the next one to its next endpoint.
    return client_.LeaseKeepAlive(lease_id_, std::chrono::milliseconds(Period() / kj::MILLISECONDS))
        .then([this, sent](Result<int64_t> ttl) -> kj::Promise<void> {
          if (lost_) return kj::READY_NOW;
          if (ttl.ok()) {
            ++counters_.keepalives_ok;
            last_ok_sent_ = sent;
          } else if (ttl.status().code() == StatusCode::kNotFound) {
            Lose(ttl.status());
            return kj::READY_NOW;
          } else {
            ++counters_.keepalives_failed;
            Log(LogLevel::kWarning, "etcd lease keepalive failed: ", ttl.status().ToString());
          }
          return KeepAliveLoop();
        });
  });
}

void LeaderElection::Campaign() {
  // Never called from inside campaign_'s own chain (which must not replace
  // itself): from Start's chain and from a watch callback's evalLater.
  campaign_ = CampaignOnce().eagerlyEvaluate(nullptr);
}

kj::Promise<void> LeaderElection::CampaignOnce() {
  if (lost_) return kj::READY_NOW;
  following_ = false;
  if (!callbacks_.ready_to_lead) return CampaignNow();
  return callbacks_.ready_to_lead().then([this]() { return CampaignNow(); },
                                         [this](kj::Exception&&) { return CampaignNow(); });
}

kj::Promise<void> LeaderElection::CampaignNow() {
  if (lost_) return kj::READY_NOW;
  ++counters_.campaigns;
  Txn txn;
  txn.compare.push_back(Compare::CreateRevisionIs(options_.key, 0));
  txn.success.push_back(Op::Put(options_.key, options_.value, lease_id_));
  txn.failure.push_back(Op::Get(options_.key));
  return client_.Commit(txn).then([this](Result<TxnResult> result) -> kj::Promise<void> {
    if (lost_) return kj::READY_NOW;
    if (!result.ok()) {
      Log(LogLevel::kWarning, "etcd campaign failed: ", result.status().ToString());
      return io_.timer().afterDelay(Period()).then([this]() { return CampaignOnce(); });
    }
    if (result->succeeded) {
      Lead(result->revision);
      return kj::READY_NOW;
    }
    if (result->responses.empty() || result->responses[0].range.kvs.empty()) {
      // Deleted between the compare and the read: try again.
      return io_.timer().afterDelay(Period()).then([this]() { return CampaignOnce(); });
    }
    const KeyValue& holder = result->responses[0].range.kvs[0];
    if (holder.lease == lease_id_) {
      // The key is ours: an earlier campaign's put landed but its answer
      // was lost (a timed-out request). Following it would follow ourselves
      // for ever, as our own keepalives keep the key.
      Log(LogLevel::kWarning, "etcd leader key ", options_.key, " already holds our lease ", lease_id_,
          " (an earlier campaign's put landed unanswered): leading");
      Lead(holder.create_revision);
      return kj::READY_NOW;
    }
    Follow(holder, result->revision + 1);
    return kj::READY_NOW;
  });
}

void LeaderElection::Lead(int64_t leader_revision) {
  leading_ = true;
  leader_revision_ = leader_revision;
  callbacks_.elected(leader_revision_);
}

void LeaderElection::Follow(const KeyValue& leader, int64_t from_revision) {
  callbacks_.following(leader);
  following_ = true;
  followed_revision_ = leader.create_revision;
  // Called from campaign_'s chain, never from leader_check_'s.
  leader_check_ = CheckLeaderKey().eagerlyEvaluate(nullptr);
  // The previous watch (if any) may be the caller: retire it a turn later.
  if (watch_) {
    retire_ = kj::evalLater([old = kj::heap(std::move(watch_))]() {}).eagerlyEvaluate(nullptr);
  }
  watch_ = client_.Watch(options_.key, "", from_revision, [this](Result<WatchBatch> batch) {
    if (lost_) return;
    if (!batch.ok() || batch->canceled) {
      // The stream ended: campaign again, which reads the holder anew.
      campaign_ = kj::evalLater([this]() { return CampaignOnce(); }).eagerlyEvaluate(nullptr);
      return;
    }
    for (const auto& event : batch->events) {
      if (event.is_delete && leading_) {
        Lose(UnavailableError("the leader key " + options_.key + " was deleted"));
        return;
      }
      if (event.is_delete) {
        campaign_ = kj::evalLater([this]() { return CampaignOnce(); }).eagerlyEvaluate(nullptr);
        return;
      }
    }
  });
}

kj::Promise<void> LeaderElection::CheckLeaderKey() {
  return io_.timer()
      .afterDelay(ttl_seconds_ * kj::SECONDS)
      .then([this]() { return client_.Range(options_.key); })
      .then([this](Result<RangeResult> key) -> kj::Promise<void> {
        // A campaign under way (the watch told after all) follows or leads.
        if (lost_ || leading_ || !following_) return kj::READY_NOW;
        // Unreadable: the watch ends too then (a campaign follows), or the
        // next check reads it.
        if (!key.ok()) return CheckLeaderKey();
        if (!key->kvs.empty() && key->kvs[0].create_revision == followed_revision_) return CheckLeaderKey();
        Log(LogLevel::kWarning, "etcd leader key ",
            key->kvs.empty() ? std::string("is gone") : "has a new holder",
            " and its watch did not tell (stalled?): campaigning");
        // The campaign's Follow starts the next check.
        Campaign();
        return kj::READY_NOW;
      });
}

kj::Promise<Status> LeaderElection::Resign() {
  const bool was_lost = lost_;
  lost_ = true;
  leading_ = false;
  start_ = nullptr;
  keepalive_ = nullptr;
  deadline_ = nullptr;
  campaign_ = nullptr;
  leader_check_ = nullptr;
  if (was_lost || lease_id_ == 0) return Status::Ok();
  Log(LogLevel::kInfo, "revoking etcd lease ", lease_id_, " (resigning)");
  return client_.LeaseRevoke(lease_id_);
}

void LeaderElection::Lose(Status why) {
  if (lost_) return;
  lost_ = true;
  leading_ = false;
  Log(LogLevel::kWarning, "etcd leadership lost: ", why.ToString());
  callbacks_.lost(why);
}

}  // namespace dispatch::etcd
