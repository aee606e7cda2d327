#include "reactor/ha/standby_follower.h"

#include <algorithm>

#include <kj/debug.h>

#include "common/log.h"
#include "reactor/ha/wire/journal_group_codec.h"
#include "reactor/ha/wire/snapshot_codec.h"
#include "state/codec.h"

namespace dispatch::ha {

struct StandbyFollower::CheckpointJob : uvkj::PoolJob {
  std::unique_ptr<storage::Checkpointer> checkpointer;
  Result<storage::CheckpointStats> stats = storage::CheckpointStats{};
  void Run() override { stats = checkpointer->Checkpoint(); }
};

StandbyFollower::StandbyFollower(uvkj::UvAsyncIo& io, etcd::EtcdClient& client,
                                 StoreOpener open_store, std::string prefix,
                                 std::function<void(const Status&)> on_failure)
    : io_(io),
      client_(client),
      open_store_(std::move(open_store)),
      prefix_(std::move(prefix)),
      on_failure_(std::move(on_failure)),
      reader_(client, prefix_),
      checkpoint_(io.loop()) {
  reader_.set_record_observer([this](std::string_view record) { ApplyToLiveState(record); });
}

StandbyFollower::~StandbyFollower() {
  // Promises first: their continuations refer to this object and the watch.
  load_ = nullptr;
  refresh_ = nullptr;
  restart_ = nullptr;
  watch_check_ = nullptr;
  watch_.reset();
  current_watch_.reset();
  // A checkpoint in flight ends on the pool by itself (its own connection).
  checkpoint_.Abandon();
  checkpointer_.reset();
}

void StandbyFollower::Start() { Load(); }

kj::Promise<void> StandbyFollower::WhenFollowing() {
  if (following_) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  waiting_for_following_.push_back(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

void StandbyFollower::Load() {
  following_ = false;
  live_.reset();
  watch_check_ = nullptr;
  watch_.reset();
  current_watch_.reset();
  refresh_ = nullptr;
  pending_image_.reset();
  checkpoint_.Abandon();
  checkpointer_.reset();  // before the store it belongs to goes
  Result<storage::Store*> store = open_store_();
  if (!store.ok()) {
    failed_ = true;
    on_failure_(store.status());
    return;
  }
  store_ = *store;
  // One revision for every read of the load, so the snapshot and the
  // journal after it belong together even while the leader writes.
  load_ = client_.Range(prefix_ + "/leader")
              .then([this](Result<etcd::RangeResult> head) -> kj::Promise<void> {
                if (!head.ok()) {
                  Restart("cannot read etcd's revision: " + head.status().ToString());
                  return kj::READY_NOW;
                }
                const int64_t revision = head->revision;
                return reader_.LoadSnapshot(*store_, revision)
                    .then([this, revision](Status loaded) -> kj::Promise<Status> {
                      if (!loaded.ok()) return loaded;
                      StartLiveState();
                      return reader_.ReadJournal(*store_, revision);
                    })
                    .then([this, revision](Status read) {
                      if (!read.ok()) {
                        if (read.code() == StatusCode::kDataLoss) {
                          failed_ = true;
                          on_failure_(read);
                        } else {
                          Restart(read.ToString());
                        }
                        return;
                      }
                      Log(LogLevel::kInfo, "standby: loaded the snapshot at record ", store_->snapshot_seq(),
                          " and the journal to record ", store_->last_seq(), " (etcd revision ", revision,
                          "); following the journal");
                      following_ = true;
                      for (auto& waiting : waiting_for_following_) waiting->fulfill();
                      waiting_for_following_.clear();
                      // Two watches: the chunks between the journal and
                      // the current snapshot's key are not for us.
                      watch_ = client_.Watch(prefix_ + "/journal/", etcd::PrefixEnd(prefix_ + "/journal/"),
                                             revision + 1,
                                             [this](Result<etcd::WatchBatch> batch) { OnWatch(std::move(batch)); });
                      current_watch_ = client_.Watch(SnapshotCurrentKey(prefix_), {}, revision + 1,
                                                     [this](Result<etcd::WatchBatch> batch) {
                                                       OnWatch(std::move(batch));
                                                     });
                      watched_revision_ = revision;
                      awaited_revision_ = 0;
                      watch_check_ = CheckWatch().eagerlyEvaluate(nullptr);
                    });
              })
              .eagerlyEvaluate([this](kj::Exception&& e) { Restart(e.getDescription().cStr()); });
}

void StandbyFollower::OnWatch(Result<etcd::WatchBatch> batch) {
  if (stopped_ || failed_ || !following_) return;
  if (!batch.ok()) {
    Restart("the journal watch ended: " + batch.status().ToString());
    return;
  }
  if (batch->canceled) {
    // Its start was compacted: this standby fell behind a snapshot.
    Restart("etcd canceled the journal watch (compacted at revision " + std::to_string(batch->compact_revision) +
            "): " + batch->cancel_reason);
    return;
  }
  const std::string journal = prefix_ + "/journal/";
  const std::string current = SnapshotCurrentKey(prefix_);
  for (const etcd::WatchEvent& event : batch->events) {
    if (event.is_delete) continue;  // keys a snapshot covers
    if (event.kv.key.rfind(journal, 0) == 0) {
      Status applied = reader_.ApplyGroup(*store_, event.kv);
      if (!applied.ok()) {
        failed_ = true;
        on_failure_(applied);
        return;
      }
      ++groups_applied_;
      watched_revision_ = std::max(watched_revision_, event.kv.mod_revision);
      TakeSnapshot();
      MaybeCheckpoint();
    } else if (event.kv.key == current) {
      Refresh(event.kv.mod_revision);
    }
  }
}

kj::Promise<void> StandbyFollower::CheckWatch() {
  return io_.timer()
      .afterDelay(kWatchCheckInterval)
      .then([this]() {
        const std::string journal = prefix_ + "/journal/";
        return client_.Range(journal, etcd::PrefixEnd(journal), /*limit=*/1, /*descending=*/true);
      })
      .then([this](Result<etcd::RangeResult> last) -> kj::Promise<void> {
        if (!WatchKeepsUp(std::move(last))) return kj::READY_NOW;
        return CheckWatch();
      });
}

bool StandbyFollower::WatchKeepsUp(Result<etcd::RangeResult> last) {
  if (!following_ || stopped_ || failed_) return false;
  if (!last.ok()) {
    // etcd unreachable: the watch fails as well then, or the next check tells.
    awaited_revision_ = 0;
    return true;
  }
  if (awaited_revision_ != 0 && watched_revision_ < awaited_revision_) {
    Restart("the journal watch stalled: it brought nothing past etcd revision " + std::to_string(watched_revision_) +
            " in " + std::to_string(kWatchCheckInterval / kj::MILLISECONDS) +
            " ms, while etcd held a journal key at revision " + std::to_string(awaited_revision_));
    return false;
  }
  const int64_t newest = last->kvs.empty() ? 0 : last->kvs.front().mod_revision;
  awaited_revision_ = newest > watched_revision_ ? newest : 0;
  return true;
}

void StandbyFollower::Refresh(int64_t revision) {
  // The store already holds every record up to S (the switch comes after
  // them in etcd's order); only the state image is new to it. A refresh
  // still running when the next switch comes is dropped for the newer one.
  auto image = std::make_shared<DecodedSnapshotImage>();
  refresh_ = reader_.ReadSnapshot(revision, image)
                 .then([this, image](Status read) {
                   if (!read.ok()) {
                     // Housekeeping only: the takeover replays a little more.
                     Log(LogLevel::kWarning, "standby: the new etcd snapshot was not taken over: ",
                         read.ToString().c_str());
                     return;
                   }
                   pending_image_ = image;
                   TakeSnapshot();
                 })
                 .eagerlyEvaluate(nullptr);
}

void StandbyFollower::TakeSnapshot() {
  // The journal watch may not have brought record S yet (two streams).
  if (pending_image_ == nullptr || pending_image_->seq > store_->last_seq()) return;
  auto image = std::move(pending_image_);
  if (image->seq <= store_->snapshot_seq()) return;
  Status written = store_->WriteSnapshot(image->seq, image->state);
  if (!written.ok()) {
    Log(LogLevel::kWarning, "standby: cannot record the snapshot at record ", image->seq, ": ",
        written.ToString().c_str());
    return;
  }
  ++snapshots_taken_;
}

void StandbyFollower::MaybeCheckpoint() {
  if (checkpoint_.in_flight() || !store_->WantsCheckpoint()) return;
  if (checkpointer_ == nullptr) {
    auto opened = store_->NewCheckpointer();
    if (!opened.ok()) {
      Log(LogLevel::kWarning, "standby: no checkpointer: ", opened.status().ToString().c_str());
      return;
    }
    checkpointer_ = std::move(opened).value();
  }
  auto job = std::make_unique<CheckpointJob>();
  job->checkpointer = std::move(checkpointer_);
  storage::Store* store = store_;
  const int rc = checkpoint_.Start(job, [this, store](std::unique_ptr<CheckpointJob> done) {
    checkpointer_ = std::move(done->checkpointer);
    if (store != store_ || failed_) return;
    if (!done->stats.ok()) {
      failed_ = true;
      on_failure_(done->stats.status());
      return;
    }
    (void)store_->FinishCheckpoint(*done->stats);
  });
  if (rc != 0) checkpointer_ = std::move(job->checkpointer);
}

void StandbyFollower::Restart(const std::string& why) {
  if (stopped_ || failed_) return;
  ++reloads_;
  following_ = false;
  Log(LogLevel::kWarning, "standby: loading from etcd again: ", why.c_str());
  // Not from inside the watch's own callback: the watch goes on the next turn.
  restart_ = io_.timer().afterDelay(100 * kj::MILLISECONDS).then([this]() { Load(); }).eagerlyEvaluate(nullptr);
}

Result<state::DispatcherState> SnapshotState(storage::Store& store) {
  auto snapshot = store.LoadLatestSnapshot();
  if (!snapshot.ok()) return snapshot.status();
  if (!snapshot->has_value()) return state::DispatcherState();
  return state::DecodeSnapshot((*snapshot)->bytes);
}

void StandbyFollower::StartLiveState() {
  live_.reset();
  live_seq_ = store_->snapshot_seq();
  auto state = SnapshotState(*store_);
  if (!state.ok()) return DropLiveState("the store's snapshot: " + state.status().ToString());
  live_ = std::make_unique<state::DispatcherState>(std::move(state).value());
}

void StandbyFollower::ApplyToLiveState(std::string_view record) {
  if (live_ == nullptr) return;
  Status applied = state::ApplyEncodedUpdate(*live_, record);
  if (!applied.ok()) {
    DropLiveState("record " + std::to_string(live_seq_ + 1) + " does not apply: " + applied.ToString());
    return;
  }
  ++live_seq_;
}

void StandbyFollower::DropLiveState(const std::string& why) {
  // Not fatal here: the takeover replays the store and meets (and reports)
  // any damage the same way a restart would.
  Log(LogLevel::kWarning, "standby: no live state (a takeover will replay the store): ", why.c_str());
  live_.reset();
}

std::unique_ptr<state::DispatcherState> StandbyFollower::TakeLiveState() {
  if (live_ != nullptr && live_seq_ != store_->last_seq()) {
    DropLiveState("it holds record " + std::to_string(live_seq_) + ", the store " +
                  std::to_string(store_->last_seq()));
  }
  return std::move(live_);
}

kj::Promise<Status> StandbyFollower::CatchUp() {
  KJ_REQUIRE(following_, "CatchUp before the standby followed the journal");
  stopped_ = true;
  following_ = false;
  refresh_ = nullptr;
  watch_check_ = nullptr;
  // The leader's DurableState checkpoints from now on.
  checkpoint_.Abandon();
  checkpointer_.reset();
  // The watch's stream closes once this returns to the loop (not from
  // inside a callback of its own: CatchUp runs from the election's).
  auto watch = std::move(watch_);
  auto current_watch = std::move(current_watch_);
  return reader_.ReadJournal(*store_, 0).attach(std::move(watch), std::move(current_watch));
}

}  // namespace dispatch::ha
