#include "reactor/ha/member.h"

#include <kj/debug.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "common/log.h"
#include "reactor/ha/ha_limits.h"
#include "reactor/ha/ha_metrics.h"
#include "reactor/ha/wire/member_record.h"
#include "reactor/metrics_exposition.h"
#include "reactor/status_document.h"
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
  DISPATCH_RETURN_IF_ERROR(
      store.Replay(store.snapshot_seq(), [&replayed](uint64_t, std::string_view bytes) {
        return state::ApplyEncodedUpdate(replayed, bytes);
      }));
  if (state::EncodeSnapshot(replayed) != state::EncodeSnapshot(live)) {
    return DataLossError("the live state differs from the store's replay through record " +
                         std::to_string(store.last_seq()));
  }
  return Status::Ok();
}

}  // namespace

HaMember::HaMember(uvkj::UvAsyncIo& io, reactor::DispatcherOptions options, HaOptions ha)
    : io_(io), options_(std::move(options)), ha_(std::move(ha)) {
  front_ = std::make_unique<reactor::Frontend>(io_, reactor::FrontendOptionsFor(options_));
  etcd::EtcdClientOptions client_options;
  client_options.endpoints = ha_.endpoints;
  // An answer holds at most kKeysPerRange values of kMaxEtcdBatchBytes,
  // base64-encoded.
  client_options.max_answer_bytes = std::max<size_t>(client_options.max_answer_bytes,
                                                     (kKeysPerRange + 1) * kMaxEtcdBatchBytes * 2);
  client_ = std::make_unique<etcd::EtcdClient>(io_, client_options);
}

HaMember::~HaMember() noexcept(false) {
  rebuild_ = nullptr;
  shutdown_ = nullptr;
  // The server first: its journal refers to journal_ (a stage), its routes
  // and gate to front_.
  server_.reset();
  follower_.reset();
  member_put_ = nullptr;
  election_.reset();
  if (journal_ != nullptr) journal_->SetSnapshotWriter(nullptr);
  snapshots_.reset();
  journal_.reset();
  client_.reset();
  store_.reset();
  front_.reset();
}

Result<std::string> HaMember::Start() {
  front_->SetGate(this);
  Result<std::string> bound = front_->Bind();
  if (!bound.ok()) return bound;
  AddStandbyRoutes();
  advertise_ = ha_.advertise.empty() ? *bound : ha_.advertise;
  reactor::LogListening(*bound, options_.work_dir, front_->http_url());

  etcd::LeaderElectionOptions election_options;
  election_options.key = ha_.prefix + "/leader";
  election_options.value = advertise_;
  // Whole seconds, at least 1; etcd raises a TTL under 1.5 x its election
  // timeout (to 2 s at its default timing), and the election then paces
  // itself by the TTL etcd granted.
  election_options.lease_ttl_seconds =
      std::max<int64_t>(1, static_cast<int64_t>((ha_.lease_ttl_ms + 999) / 1000));
  etcd::LeaderElectionCallbacks callbacks;
  callbacks.granted = [this](int64_t lease_id) { OnGranted(lease_id); };
  callbacks.elected = [this](int64_t revision) { OnElected(revision); };
  callbacks.following = [this](const etcd::KeyValue& leader) { OnFollowing(leader); };
  callbacks.lost = [this](const Status& why) { Stop(why); };
  callbacks.ready_to_lead = [this]() -> kj::Promise<void> {
    // Winning while the follower loads would load everything again, cold;
    // waiting lets a caught-up standby win instead. Bounded, so that a
    // follower that cannot load (it restarts its load on errors) never keeps
    // a lone survivor from leading.
    if (follower_ == nullptr || follower_->following()) return kj::READY_NOW;
    Log(LogLevel::kInfo,
        "standby: still loading the journal from etcd; campaigning once it is loaded (at most ",
        kLoadingStandbyWait / kj::MILLISECONDS, " ms)");
    return io_.timer().timeoutAfter(kLoadingStandbyWait, follower_->WhenFollowing());
  };
  election_ = std::make_unique<etcd::LeaderElection>(io_, *client_, election_options, callbacks);
  Log(LogLevel::kInfo, "HA mode: campaigning for ", election_options.key.c_str(), " on ",
      client_->endpoint().c_str(), " as ", advertise_.c_str(), " (lease TTL ",
      election_options.lease_ttl_seconds, " s)");
  election_->Start();
  return bound;
}

void HaMember::AddStandbyRoutes() {
  reactor::HttpEndpoints* http = front_->http();
  if (http == nullptr) return;
  http->AddRoute("/readyz", [this]() -> kj::Promise<reactor::HttpReply> {
    if (shutting_down_)
      return reactor::HttpReply{503, "text/plain; charset=utf-8", "not ready: shutting down\n"};
    const std::string why =
        standby_of_.empty() ? "standby, no leader known yet" : "standby of " + standby_of_;
    return reactor::HttpReply{503, "text/plain; charset=utf-8", why + "\n"};
  });
  // The loop copies the figures; the thread pool formats them.
  http->AddRoute("/metrics", [this]() -> kj::Promise<reactor::HttpReply> {
    auto families = std::make_shared<std::vector<prometheus::MetricFamily>>(
        reactor::CollectFrontMetrics(*front_, [this](reactor::MetricFamilies& f) {
          AddHaMetrics(f, HaStatusNow(), nullptr);
        }));
    return front_->off_loop()
        ->Run([families]() { return reactor::SerializeMetrics(*families); })
        .then([](std::string text) {
          return reactor::HttpReply{200, "text/plain; version=0.0.4; charset=utf-8",
                                    std::move(text)};
        });
  });
  http->AddRoute("/api/status", [this]() -> kj::Promise<reactor::HttpReply> {
    const std::string why = shutting_down_        ? "shutting down"
                            : standby_of_.empty() ? "standby, no leader known yet"
                                                  : "standby of " + standby_of_;
    auto doc = std::make_shared<reactor::Json>(reactor::CollectFrontStatus(*front_, false, why));
    return front_->off_loop()->Run([doc]() { return doc->Encode(); }).then([](std::string text) {
      return reactor::HttpReply{200, "application/json", std::move(text)};
    });
  });
}

rpc::Dispatcher::Client HaMember::Admit(reactor::RpcServer::ConnectionId) {
  KJ_FAIL_REQUIRE("a standby admits no one");
}

Status HaMember::NotLeaderError() const {
  if (standby_of_.empty()) return UnavailableError("not the leader; no leader is known yet");
  return UnavailableError("not the leader; the leader is " + standby_of_);
}

int HaMember::exit_code() const { return server_ != nullptr ? server_->exit_code() : exit_code_; }

HaStatus HaMember::HaStatusNow() const {
  HaStatus status;
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

Result<storage::Store*> HaMember::OpenStore() {
  KJ_REQUIRE(server_ == nullptr, "OpenStore once leading");
  store_.reset();
  const std::string dir = options_.work_dir + "/ha-cache";
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  if (error) return UnavailableError("cannot empty " + dir + ": " + error.message());
  std::filesystem::create_directories(dir, error);
  if (error) return UnavailableError("cannot create " + dir + ": " + error.message());
  storage::StoreOptions store_options = reactor::StoreOptionsFor(options_);
  store_options.work_dir = dir;
  // A cache of the etcd journal: durability is etcd's, so no fsync here.
  store_options.synchronous = storage::Synchronous::kNormal;
  store_options.defer_sync = false;
  auto store = storage::Store::Open(store_options);
  if (!store.ok()) return store.status();
  store_ = std::move(store.value());
  return store_.get();
}

void HaMember::OnFollowing(const etcd::KeyValue& leader) {
  Log(LogLevel::kInfo, "standby: the leader is ", leader.value.c_str());
  standby_of_ = leader.value;
  if (follower_ == nullptr && journal_ == nullptr) {
    // A hot standby: follow the journal while waiting (§6).
    follower_ = std::make_unique<StandbyFollower>(
        io_, *client_, [this]() { return OpenStore(); }, ha_.prefix,
        [this](const Status& why) { Stop(why); });
    follower_->Start();
  }
}

void HaMember::OnGranted(int64_t lease_id) {
  MemberRecord member;
  member.rpc = advertise_;
  member.http = front_->http_url();
  member.pid = static_cast<uint32_t>(getpid());
  member.started_unix_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  const std::string key = MemberKey(ha_.prefix, lease_id);
  // Informational (dispatchctl group): a failed put costs no correctness.
  member_put_ =
      client_->Put(key, EncodeMemberRecord(member), lease_id)
          .then([key](Result<int64_t> put) {
            if (!put.ok())
              Log(LogLevel::kWarning, "cannot write ", key.c_str(), ": ", put.status().ToString());
          })
          .eagerlyEvaluate(nullptr);
}

kj::Promise<void> HaMember::Resign(kj::Duration timeout) {
  rebuild_ = nullptr;
  if (!election_) return kj::READY_NOW;
  return io_.timer()
      .timeoutAfter(timeout, election_->Resign())
      .then(
          [](Status revoked) {
            if (!revoked.ok()) Log(LogLevel::kWarning, "lease not revoked: ", revoked.ToString());
          },
          [](kj::Exception&& e) {
            Log(LogLevel::kWarning, "lease not revoked: ", e.getDescription().cStr());
          });
}

void HaMember::OnElected(int64_t leader_revision) {
  const uint64_t start = uv_hrtime();
  kj::Promise<Status> filled = nullptr;
  if (follower_ != nullptr && follower_->following()) {
    // Hot: the store holds what the watch delivered; only the end of the
    // journal (keys the old leader wrote that the watch had not brought
    // yet) is left to read.
    Log(LogLevel::kInfo, "elected (leader revision ", leader_revision,
        "): reading the journal after record ", follower_->store()->last_seq(), " from etcd");
    filled = follower_->CatchUp();
  } else {
    // Cold: the follower had not loaded yet (or is loading again).
    follower_.reset();
    Log(LogLevel::kInfo, "elected (leader revision ", leader_revision,
        "): reading the journal from etcd");
    Result<storage::Store*> opened = OpenStore();
    if (!opened.ok()) {
      Stop(opened.status());
      return;
    }
    storage::Store* store = *opened;
    auto reader = std::make_shared<EtcdStateReader>(*client_, ha_.prefix);
    // The reader lives as long as the whole chain (not only the first step).
    filled = reader->LoadSnapshot(*store, 0)
                 .then([reader, store](Status loaded) -> kj::Promise<Status> {
                   if (!loaded.ok()) return loaded;
                   return reader->ReadJournal(*store, 0);
                 })
                 .attach(std::shared_ptr<EtcdStateReader>(reader));
  }
  rebuild_ = filled
                 .then([this, leader_revision, start](Status status) {
                   if (!status.ok()) {
                     Stop(status);
                     return;
                   }
                   Lead(leader_revision, start);
                 })
                 .eagerlyEvaluate([this](kj::Exception&& e) {
                   Stop(InternalError(std::string("rebuilding from etcd failed: ") +
                                      e.getDescription().cStr()));
                 });
}

void HaMember::Lead(int64_t leader_revision, uint64_t elected_ns) {
  if (shutting_down_) return;  // a stop arrived while the store was filled
  storage::Store& local = *store_;
  std::unique_ptr<state::DispatcherState> live;
  if (follower_ != nullptr) live = follower_->TakeLiveState();
  follower_.reset();
  if (live != nullptr && ha_.test_check_live_state) {
    Status same = CheckLiveState(local, *live);
    if (!same.ok()) {
      Stop(same);
      return;
    }
    Log(LogLevel::kInfo, "the live state matches the store's replay through record ",
        local.last_seq());
  }
  EtcdJournalOptions journal_options;
  journal_options.prefix = ha_.prefix;
  journal_options.leader_revision = leader_revision;
  journal_ = std::make_unique<EtcdJournal>(io_, *client_, journal_options,
                                           [this](const Status& why) { Stop(why); });
  // etcd holds every record the local store was filled with.
  journal_->StartAfter(local.last_seq());
  EtcdSnapshotWriterOptions snapshot_options;
  snapshot_options.prefix = ha_.prefix;
  snapshot_options.leader_revision = leader_revision;
  snapshot_options.kill_before_switch = ha_.test_kill_before_snapshot_switch;
  snapshots_ = std::make_unique<EtcdSnapshotWriter>(
      io_, *client_, *journal_, local, snapshot_options, [this](const Status& why) { Stop(why); });
  journal_->SetSnapshotWriter(snapshots_.get());
  Log(LogLevel::kInfo, "the local store holds the snapshot at record ", local.snapshot_seq(),
      " and the journal to record ", local.last_seq(), "; filled in ",
      (uv_hrtime() - elected_ns) / 1000000, " ms since elected");
  reactor::ServingParts parts;
  parts.front = front_.get();
  parts.store = std::move(store_);
  parts.live = std::move(live);
  parts.replicator = journal_.get();
  parts.extra_metrics = [this](reactor::MetricFamilies& f) {
    AddHaMetrics(f, HaStatusNow(), journal_.get());
  };
  server_ = std::make_unique<reactor::DispatcherServer>(io_, options_, std::move(parts));
  Status serving = server_->Serve();
  if (!serving.ok()) {
    Stop(serving);
    return;
  }
  standby_of_.clear();
  Log(LogLevel::kInfo, "leading: serving as the HA leader");
}

void HaMember::BeginShutdown(const char* why) {
  if (server_ != nullptr) {
    server_->BeginShutdown(why);
    return;
  }
  const std::optional<uint64_t> deadline =
      front_->StartDrain(&shutting_down_, why, options_.drain_timeout_ms);
  if (!deadline) return;
  shutdown_ = front_->DrainReplies(*deadline)
                  .then([this]() {
                    front_->Close();
                    // Let the close events run, then leave uv_run.
                    return kj::evalLater([this]() {
                      Log(LogLevel::kInfo, "shutdown complete");
                      io_.Stop();
                    });
                  })
                  .eagerlyEvaluate([this](kj::Exception&& e) {
                    Log(LogLevel::kError, "shutdown failed: ", e.getDescription());
                    io_.Stop();
                  });
}

void HaMember::Stop(const Status& why) {
  Log(LogLevel::kError, "HA: ", why.ToString().c_str());
  if (server_ != nullptr) {
    // Nothing more is acknowledged: every parked reply fails.
    server_->StopAtOnce(why, reactor::kExitLeadershipLost);
    return;
  }
  if (exit_code_ != 0) return;
  exit_code_ = reactor::kExitLeadershipLost;
  Log(LogLevel::kError, "exiting with code ", exit_code_, ": ", why.ToString().c_str());
  shutting_down_ = true;
  front_->StopAccepting();
  front_->Close();
  io_.Stop();
}

}  // namespace dispatch::ha
