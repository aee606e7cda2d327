// EtcdSnapshotWriter: the HA leader's snapshots in etcd, so that etcd's size
// stays bounded (docs/high_availability.md §5). It reuses the local store's
// snapshots: when DurableState starts one (right after the commit of record
// S) it pins a read transaction of the store's dataset and result tables at
// S (storage::TablesReader); when the store has recorded the snapshot file,
// a thread-pool job reads that file's body and the pinned tables, encodes
// them as one image (snapshot_codec.h) and cuts it into chunks. Then, on the
// loop, one etcd transaction at a time, each guarded by our leadership
// (compare create_revision(P/leader) == leader_revision):
//   1. delete P/snapshot/S/ (chunks an earlier attempt at S may have left);
//   2. put P/snapshot/S/CHUNK, for every chunk in order;
//   3. once etcd holds the journal through S, the switch: put
//      P/snapshot/current (the descriptor), delete [P/journal/, P/journal/S+1)
//      and every P/snapshot/ chunk prefix but S's;
//   4. compaction at the switch's revision, physical.
// A leader killed before 3 leaves orphan chunks (and the previous snapshot
// current, its journal keys intact); the next switch deletes them. Nothing of
// this holds a reply: journal transactions flow meanwhile. A failed compare
// is fencing: `on_failure` once (fail-stop, as the journal does). Any other
// refusal, or a local failure, gives this snapshot up (counted; the journal
// still holds every record); an unanswered transaction is sent again after
// retry_delay (each is idempotent). A local snapshot that starts while one is
// being sent waits as the next one (a newer one replaces it).
// REQUIRES: loop thread only; the client, journal and store outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <kj/async.h>

#include "reactor/etcd/etcd_client.h"
#include "reactor/ha/etcd_journal.h"
#include "reactor/ha/wire/snapshot_codec.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/pool_work.h"
#include "storage/store.h"

namespace dispatch::ha {

struct EtcdSnapshotWriterOptions {
  std::string prefix;
  int64_t leader_revision = 0;
  size_t chunk_bytes = kSnapshotChunkPayloadBytes;
  std::chrono::milliseconds retry_delay{100};
  // Test hook (tests/etcd, DISPATCH_TEST_HA_SNAPSHOT_KILL_BEFORE_SWITCH):
  // the Nth snapshot this process sends kills the process (SIGKILL) after its
  // last chunk, before the switch. 0: never.
  uint64_t kill_before_switch = 0;
};

class EtcdSnapshotWriter final : private kj::TaskSet::ErrorHandler {
 public:
  EtcdSnapshotWriter(uvkj::UvAsyncIo& io, etcd::EtcdClient& client, EtcdJournal& journal,
                     storage::Store& store, EtcdSnapshotWriterOptions options,
                     std::function<void(const Status&)> on_failure);
  ~EtcdSnapshotWriter() noexcept(false);
  EtcdSnapshotWriter(const EtcdSnapshotWriter&) = delete;
  EtcdSnapshotWriter& operator=(const EtcdSnapshotWriter&) = delete;

  // From the journal (JournalReplicator's snapshot hooks).
  void Started(uint64_t seq);
  void Ended(uint64_t seq, const storage::SnapshotFileInfo* recorded);

  bool busy() const { return busy_; }

 private:
  struct Pinned {
    uint64_t seq = 0;
    std::unique_ptr<storage::TablesReader> reader;
    std::optional<storage::SnapshotFileInfo> recorded;
  };
  struct BuildJob;
  enum class Step { kClear, kChunk, kSwitch };

  void MaybeStart();
  void OnBuilt(std::unique_ptr<BuildJob> job);
  kj::Promise<void> Send();
  kj::Promise<void> SendSwitch();
  void OnAnswer(Result<etcd::TxnResult> result);
  kj::Promise<void> Compact(int64_t revision);
  void GiveUp(const Status& why);
  void Done();
  void taskFailed(kj::Exception&& exception) override;

  uvkj::UvAsyncIo& io_;
  etcd::EtcdClient& client_;
  EtcdJournal& journal_;
  storage::Store& store_;
  const EtcdSnapshotWriterOptions options_;
  const std::function<void(const Status&)> on_failure_;
  reactor::ReplicatorStats& stats_;
  const std::string leader_key_;

  std::optional<Pinned> next_;  // the latest local snapshot not being sent yet
  bool busy_ = false;           // one is being built, sent or switched
  bool failed_ = false;
  uint64_t attempts_ = 0;       // snapshots whose sending began
  uint64_t seq_ = 0;            // S of the one being sent
  // The snapshot being sent.
  SnapshotChunks chunks_;
  Step step_ = Step::kClear;
  uint64_t chunk_ = 0;
  uint64_t started_ns_ = 0;
  uvkj::PoolWork<BuildJob> build_;
  kj::TaskSet tasks_{*this};  // last: destroyed first (its tasks refer to the rest)
};

}  // namespace dispatch::ha
