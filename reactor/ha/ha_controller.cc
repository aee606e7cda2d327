#include "reactor/ha/ha_controller.h"

#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <chrono>

#include <kj/debug.h>

#include "common/log.h"
#include "common/checksum.h"
#include "reactor/ha/wire/journal_group_codec.h"
#include "reactor/ha/wire/member_record.h"
#include "state/codec.h"

namespace dispatch::ha {
namespace {

constexpr int64_t kKeysPerRange = EtcdStateReader::kKeysPerRange;
// The longest a standby whose follower is still loading holds back its
// campaign (LeaderElectionCallbacks::ready_to_lead).
constexpr kj::Duration kLoadingStandbyWait = 10 * kj::SECONDS;

// HaOptions::test_check_live_state: the live state against a replay of the
// same store (what a takeover without one would have served).
Status CheckLiveState(storage::Store& store, const state::DispatcherState& live) {
  auto snapshot = SnapshotState(store);
  if (!snapshot.ok()) return snapshot.status();
  state::DispatcherState replayed = std::move(snapshot).value();
  DISPATCH_RETURN_IF_ERROR(store.Replay(store.snapshot_seq(), [&replayed](uint64_t, std::string_view bytes) {
    return state::ApplyEncodedUpdate(replayed, bytes);
  }));
  if (state::EncodeSnapshot(replayed) != state::EncodeSnapshot(live)) {
    return DataLossError("the live state differs from the store's replay through record " +
                         std::to_string(store.last_seq()));
  }
  return Status::Ok();
}

}  // namespace

HaController::HaController(uvkj::UvAsyncIo& io, reactor::DispatcherServer& server, HaOptions options)
    : io_(io), server_(server), options_(std::move(options)) {
  etcd::EtcdClientOptions client_options;
  client_options.endpoints = options_.endpoints;
  // An answer holds at most kKeysPerRange values of kMaxEtcdBatchBytes,
  // base64-encoded.
  client_options.max_answer_bytes = std::max<size_t>(client_options.max_answer_bytes,
                                                     (kKeysPerRange + 1) * kMaxEtcdBatchBytes * 2);
  client_ = std::make_unique<etcd::EtcdClient>(io_, client_options);
}

HaController::~HaController() {
  server_.SetHaStatusSource(nullptr);
  rebuild_ = nullptr;
  follower_.reset();
  member_put_ = nullptr;
  election_.reset();
  if (journal_ != nullptr) journal_->SetSnapshotWriter(nullptr);
  snapshots_.reset();
  // The server's journal refers to journal_: it is never used after the
  // loop stopped, and the server is destroyed after this object's owner
  // is done with both.
  journal_.reset();
  client_.reset();
}

void HaController::Start() {
  etcd::LeaderElectionOptions election_options;
  election_options.key = options_.prefix + "/leader";
  election_options.value = options_.advertise;
  // Whole seconds, at least 1; etcd raises a TTL under 1.5 x its election
  // timeout (to 2 s at its default timing), and the election then paces
  // itself by the TTL etcd granted.
  election_options.lease_ttl_seconds =
      std::max<int64_t>(1, static_cast<int64_t>((options_.lease_ttl_ms + 999) / 1000));
  etcd::LeaderElectionCallbacks callbacks;
  callbacks.granted = [this](int64_t lease_id) { OnGranted(lease_id); };
  callbacks.elected = [this](int64_t revision) { OnElected(revision); };
  callbacks.following = [this](const etcd::KeyValue& leader) {
    Log(LogLevel::kInfo, "standby: the leader is ", leader.value.c_str());
    server_.SetStandbyOf(leader.value);
    if (follower_ == nullptr && journal_ == nullptr) {
      // A hot standby: follow the journal while waiting (§6).
      follower_ = std::make_unique<StandbyFollower>(io_, *client_, server_, options_.prefix,
                                                    [this](const Status& why) { Stop(why); });
      follower_->Start();
    }
  };
  callbacks.lost = [this](const Status& why) { Stop(why); };
  callbacks.ready_to_lead = [this]() -> kj::Promise<void> {
    // Winning while the follower loads would load everything again, cold;
    // waiting lets a caught-up standby win instead. Bounded, so that a
    // follower that cannot load (it restarts its load on errors) never keeps
    // a lone survivor from leading.
    if (follower_ == nullptr || follower_->following()) return kj::READY_NOW;
    Log(LogLevel::kInfo, "standby: still loading the journal from etcd; campaigning once it is loaded (at most ",
        kLoadingStandbyWait / kj::MILLISECONDS, " ms)");
    return io_.timer().timeoutAfter(kLoadingStandbyWait, follower_->WhenFollowing());
  };
  election_ = std::make_unique<etcd::LeaderElection>(io_, *client_, election_options, callbacks);
  server_.SetHaStatusSource([this]() { return HaStatusNow(); });
  Log(LogLevel::kInfo, "HA mode: campaigning for ", election_options.key.c_str(), " on ",
      client_->endpoint().c_str(), " as ", options_.advertise.c_str(), " (lease TTL ",
      election_options.lease_ttl_seconds, " s)");
  election_->Start();
}

reactor::HaStatus HaController::HaStatusNow() const {
  reactor::HaStatus status;
  if (election_ != nullptr) {
    const etcd::LeaderElectionCounters& counters = election_->counters();
    status.leading = election_->leading();
    status.lease_ttl_seconds = election_->granted_ttl_seconds();
    status.campaigns = counters.campaigns;
    status.keepalives_ok = counters.keepalives_ok;
    status.keepalives_failed = counters.keepalives_failed;
    status.lease_grants_failed = counters.grants_failed;
  }
  if (follower_ != nullptr) {
    status.following = follower_->following();
    status.standby_seq = follower_->store() != nullptr ? follower_->store()->last_seq() : 0;
    status.live_state = follower_->has_live_state();
    status.standby_reloads = follower_->reloads();
  }
  return status;
}

void HaController::OnGranted(int64_t lease_id) {
  MemberRecord member;
  member.rpc = options_.advertise;
  member.http = server_.http_url();
  member.pid = static_cast<uint32_t>(getpid());
  member.started_unix_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  const std::string key = MemberKey(options_.prefix, lease_id);
  // Informational (dispatchctl group): a failed put costs no correctness.
  member_put_ = client_->Put(key, EncodeMemberRecord(member), lease_id)
                    .then([key](Result<int64_t> put) {
                      if (!put.ok()) Log(LogLevel::kWarning, "cannot write ", key.c_str(), ": ", put.status().ToString());
                    })
                    .eagerlyEvaluate(nullptr);
}

kj::Promise<void> HaController::Resign(kj::Duration timeout) {
  rebuild_ = nullptr;
  if (!election_) return kj::READY_NOW;
  return io_.timer()
      .timeoutAfter(timeout, election_->Resign())
      .then(
          [](Status revoked) {
            if (!revoked.ok()) Log(LogLevel::kWarning, "lease not revoked: ", revoked.ToString());
          },
          [](kj::Exception&& e) { Log(LogLevel::kWarning, "lease not revoked: ", e.getDescription().cStr()); });
}

void HaController::OnElected(int64_t leader_revision) {
  const uint64_t start = uv_hrtime();
  kj::Promise<Status> filled = nullptr;
  storage::Store* store = nullptr;
  if (follower_ != nullptr && follower_->following()) {
    // Hot: the store holds what the watch delivered; only the end of the
    // journal (keys the old leader wrote that the watch had not brought
    // yet) is left to read.
    Log(LogLevel::kInfo, "elected (leader revision ", leader_revision, "): reading the journal after record ",
        follower_->store()->last_seq(), " from etcd");
    store = follower_->store();
    filled = follower_->CatchUp();
  } else {
    // Cold: the follower had not loaded yet (or is loading again).
    follower_.reset();
    Log(LogLevel::kInfo, "elected (leader revision ", leader_revision, "): reading the journal from etcd");
    Result<storage::Store*> opened = server_.OpenHaStore();
    if (!opened.ok()) {
      Stop(opened.status());
      return;
    }
    store = *opened;
    auto reader = std::make_shared<EtcdStateReader>(*client_, options_.prefix);
    // The reader lives as long as the whole chain (not only the first step).
    filled = reader->LoadSnapshot(*store, 0)
                 .then([reader, store](Status loaded) -> kj::Promise<Status> {
                   if (!loaded.ok()) return loaded;
                   return reader->ReadJournal(*store, 0);
                 })
                 .attach(std::shared_ptr<EtcdStateReader>(reader));
  }
  storage::Store& local = *store;
  rebuild_ = filled
                 .then([this, leader_revision, start, &local](Status status) {
                   if (!status.ok()) {
                     Stop(status);
                     return;
                   }
                   std::unique_ptr<state::DispatcherState> live;
                   if (follower_ != nullptr) live = follower_->TakeLiveState();
                   follower_.reset();
                   if (live != nullptr && options_.test_check_live_state) {
                     Status same = CheckLiveState(local, *live);
                     if (!same.ok()) {
                       Stop(same);
                       return;
                     }
                     Log(LogLevel::kInfo, "the live state matches the store's replay through record ",
                         local.last_seq());
                   }
                   EtcdJournalOptions journal_options;
                   journal_options.prefix = options_.prefix;
                   journal_options.leader_revision = leader_revision;
                   journal_ = std::make_unique<EtcdJournal>(
                       io_, *client_, journal_options, [this](const Status& why) { Stop(why); });
                   // etcd holds every record the local store was filled with.
                   journal_->StartAfter(local.last_seq());
                   EtcdSnapshotWriterOptions snapshot_options;
                   snapshot_options.prefix = options_.prefix;
                   snapshot_options.leader_revision = leader_revision;
                   snapshot_options.kill_before_switch = options_.test_kill_before_snapshot_switch;
                   snapshots_ = std::make_unique<EtcdSnapshotWriter>(
                       io_, *client_, *journal_, local, snapshot_options, [this](const Status& why) { Stop(why); });
                   journal_->SetSnapshotWriter(snapshots_.get());
                   Log(LogLevel::kInfo, "the local store holds the snapshot at record ", local.snapshot_seq(),
                       " and the journal to record ", local.last_seq(), "; filled in ",
                       (uv_hrtime() - start) / 1000000, " ms since elected");
                   Status leading = server_.BecomeLeader(journal_.get(), std::move(live));
                   if (!leading.ok()) Stop(leading);
                 })
                 .eagerlyEvaluate([this](kj::Exception&& e) {
                   Stop(InternalError(std::string("rebuilding from etcd failed: ") + e.getDescription().cStr()));
                 });
}

void HaController::Stop(const Status& why) {
  Log(LogLevel::kError, "HA: ", why.ToString().c_str());
  server_.StopOnLeadershipLost(why);
}

}  // namespace dispatch::ha
