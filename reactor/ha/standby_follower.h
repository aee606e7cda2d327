// StandbyFollower: a hot standby's copy of the etcd journal
// (docs/high_availability.md §6). While another dispatcher leads, it fills a
// fresh local store (the member's ha-cache, opened by `open_store` at every
// load) from etcd at one revision R (the
// snapshot, then the journal keys after it: EtcdStateReader), then watches
// PREFIX/journal/ .. PREFIX/snapshot/ from R+1 and commits each journal group
// to the store as it arrives (a gap or a damaged group: `on_failure`, a
// DataLoss exit; a restart rebuilds from etcd). A new current snapshot (a
// second watch, on PREFIX/snapshot/current) becomes the store's snapshot too
// once the store holds its record (its image is read from etcd at the
// event's revision and recorded with Store::WriteSnapshot), so that the
// takeover's replay stays within about one --snapshot-every when the live
// state below is lost. Every record the store takes is applied to a live
// DispatcherState too (built from the store's snapshot at load), so that the
// winner serves from it with no replay at all. A watch that etcd
// cancels (its start was compacted: the standby fell behind a snapshot) or
// that fails starts the whole load over, from a fresh store, and so does a
// watch that stalls: every kWatchCheckInterval the follower reads the last
// journal key, and when the watch has still not brought a key etcd already
// held at the previous check, it loads again (a stream that neither delivers
// nor ends, seen once under heavy load, would otherwise leave the standby
// behind until a takeover). On winning,
// CatchUp() stops the watch and ranges the journal from the store's position
// to the end: the store then holds everything etcd holds, and the server
// the member builds recovers from it as after a restart. The store's WAL is checkpointed on
// the thread pool as it grows.
// REQUIRES: loop thread only; the client and the stores outlive it.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reactor/etcd/etcd_client.h"
#include "reactor/ha/etcd_state_reader.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/pool_work.h"
#include "state/dispatcher_state.h"
#include "storage/checkpointer.h"
#include "storage/store.h"

namespace dispatch::ha {

// The state of `store`'s latest snapshot (an empty state when it has none).
Result<state::DispatcherState> SnapshotState(storage::Store& store);

class StandbyFollower {
 public:
  // Empties the local store's place and opens a fresh store there (each
  // load starts from one); the store stays its caller's.
  using StoreOpener = std::function<Result<storage::Store*>()>;
  StandbyFollower(uvkj::UvAsyncIo& io, etcd::EtcdClient& client, StoreOpener open_store,
                  std::string prefix, std::function<void(const Status&)> on_failure);
  ~StandbyFollower();
  StandbyFollower(const StandbyFollower&) = delete;
  StandbyFollower& operator=(const StandbyFollower&) = delete;

  void Start();
  // True once the store holds etcd's state at some revision and the watch
  // is applying what follows.
  bool following() const { return following_; }
  // Resolves once following() is true (at once when it is already); broken
  // when the follower is destroyed first.
  kj::Promise<void> WhenFollowing();
  // Stops following and brings the store to etcd's end. REQUIRES: following().
  kj::Promise<Status> CatchUp();
  storage::Store* store() const { return store_; }
  // After CatchUp: the DispatcherState of exactly the store's snapshot and
  // records, applied as they arrived (§6: the takeover replays nothing), or
  // null when it could not be kept (the takeover then replays the store).
  std::unique_ptr<state::DispatcherState> TakeLiveState();
  uint64_t groups_applied() const { return groups_applied_; }
  uint64_t reloads() const { return reloads_; }
  // How often the journal watch is checked for a stall (two checks tell one).
  static constexpr kj::Duration kWatchCheckInterval = 2 * kj::SECONDS;
  bool has_live_state() const { return live_ != nullptr; }

 private:
  void Load();
  void OnWatch(Result<etcd::WatchBatch> batch);
  void Refresh(int64_t revision);
  void TakeSnapshot();
  // The store's WAL is copied back off the loop, as DurableState does for a
  // leader (nothing else checkpoints a standby's store).
  void MaybeCheckpoint();
  struct CheckpointJob;
  void Restart(const std::string& why);
  // While following: every kWatchCheckInterval, the last journal key's
  // revision in etcd against what the watch has brought. Ends when the
  // follower stops following (a stall restarts the load, which checks anew).
  kj::Promise<void> CheckWatch();
  // False when the checks end: not following any more, or the watch stalled
  // (then the load has been restarted).
  bool WatchKeepsUp(Result<etcd::RangeResult> last);
  // The live state from the store's snapshot (none: an empty state); the
  // journal records then arrive through the reader's observer.
  void StartLiveState();
  void ApplyToLiveState(std::string_view record);
  void DropLiveState(const std::string& why);

  uvkj::UvAsyncIo& io_;
  etcd::EtcdClient& client_;
  const StoreOpener open_store_;
  const std::string prefix_;
  const std::function<void(const Status&)> on_failure_;
  EtcdStateReader reader_;
  storage::Store* store_ = nullptr;
  bool following_ = false;
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> waiting_for_following_;
  bool stopped_ = false;
  bool failed_ = false;
  uint64_t groups_applied_ = 0;
  uint64_t reloads_ = 0;
  uint64_t snapshots_taken_ = 0;
  // A current snapshot read from etcd whose record the store does not hold yet.
  std::shared_ptr<DecodedSnapshotImage> pending_image_;
  std::unique_ptr<state::DispatcherState> live_;
  uint64_t live_seq_ = 0;  // the store's last record the live state holds
  // The journal watch's progress: the load's revision, then the mod revision
  // of each journal key it brought.
  int64_t watched_revision_ = 0;
  // The last journal key's revision at the previous check when the watch had
  // not brought it yet (0: it had).
  int64_t awaited_revision_ = 0;
  std::unique_ptr<storage::Checkpointer> checkpointer_;  // idle; the job holds it while it runs
  uvkj::PoolWork<CheckpointJob> checkpoint_;
  std::unique_ptr<etcd::EtcdWatch> watch_;          // PREFIX/journal/
  std::unique_ptr<etcd::EtcdWatch> current_watch_;  // PREFIX/snapshot/current
  kj::Promise<void> load_ = nullptr;
  kj::Promise<void> refresh_ = nullptr;
  kj::Promise<void> restart_ = nullptr;
  kj::Promise<void> watch_check_ = nullptr;
};

}  // namespace dispatch::ha
