// EtcdJournal: the HA leader's journal in etcd (docs/high_availability.md §4),
// a JournalReplicator. Every local group commit (pass) is appended to an open
// group; one etcd transaction is in flight at a time, and when it is
// acknowledged everything that accumulated meanwhile goes out as the next
// single transaction, at most kMaxEtcdBatchBytes per value (a pass that would
// cross it closes the group; the next pass starts another). Each transaction:
//   compare create_revision(P/leader) == leader_revision   (fencing)
//           version(P/journal/SEQ) == 0                     (the slot is free)
//   success put P/journal/SEQ = group
//   failure range P/leader, range P/journal/SEQ
// A group's writes pass the stage only when its transaction is acknowledged.
// A transaction without an answer (connection failure, timeout) is sent
// again, to the next endpoint, after retry_delay: if the first attempt had
// landed, the slot compare fails and the failure branch shows our own value,
// which counts as acknowledged. A failed compare otherwise (another leader,
// or the slot holds another value) is fencing, and any other error is the
// etcd journal refusing us: both call `on_failure` once (fail-stop, exit
// kExitLeadershipLost), acknowledging nothing of the group in flight.
// Groups waiting beyond max_queued_bytes make Admit() refuse new updates.
// REQUIRES: loop thread only; the client outlives it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <kj/async.h>

#include "reactor/etcd/etcd_client.h"
#include "reactor/journal_replicator.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::ha {

class EtcdSnapshotWriter;

struct EtcdJournalOptions {
  std::string prefix;           // --ha-prefix: keys are PREFIX/leader, PREFIX/journal/SEQ
  int64_t leader_revision = 0;  // the create revision of PREFIX/leader (our leadership)
  size_t max_group_bytes = reactor::kMaxEtcdBatchBytes;
  // Bytes of groups waiting (not in flight) past which Admit() refuses.
  size_t max_queued_bytes = size_t{64} << 20;
  std::chrono::milliseconds retry_delay{100};
};

class EtcdJournal final : public reactor::JournalReplicator, private kj::TaskSet::ErrorHandler {
 public:
  EtcdJournal(uvkj::UvAsyncIo& io, etcd::EtcdClient& client, EtcdJournalOptions options,
              std::function<void(const Status&)> on_failure);
  ~EtcdJournal() noexcept(false) override;
  EtcdJournal(const EtcdJournal&) = delete;
  EtcdJournal& operator=(const EtcdJournal&) = delete;

  void Written(uint64_t write, const JournalBatch* batch, uint64_t first_seq) override;
  uint64_t durable() const override { return durable_; }
  Status Admit() override;
  bool idle() const override { return groups_.empty(); }
  void Fail(const Status& status) override;
  // Resolves when everything told so far is in etcd (at once when nothing
  // waits); rejected when the journal fails.
  kj::Promise<void> Barrier();
  const reactor::ReplicatorStats& stats() const override { return stats_; }
  // Closes the open group at `seq` (so the next key is P/journal/seq+1,
  // where a snapshot of record `seq` lets the journal go on), then tells
  // the snapshot writer, if any.
  void SnapshotStarted(uint64_t seq) override;
  void SnapshotEnded(uint64_t seq, const storage::SnapshotFileInfo* recorded) override;

  // Where local snapshots are sent on; null: nowhere.
  void SetSnapshotWriter(EtcdSnapshotWriter* writer) { snapshot_writer_ = writer; }
  // The last record etcd acknowledged (every record up to it is in etcd).
  uint64_t acknowledged_seq() const { return acknowledged_seq_; }
  // Makes the journal go on after record `seq` (a takeover that installed
  // the snapshot of `seq` with no journal after it). REQUIRES: nothing appended.
  void StartAfter(uint64_t seq) { acknowledged_seq_ = seq; }
  bool failed() const { return failed_; }
  reactor::ReplicatorStats& mutable_stats() { return stats_; }

 private:
  struct Group {
    uint64_t first_seq = 0;
    uint64_t next_seq = 0;  // first_seq + records so far
    size_t bytes = 0;       // estimated encoded size
    std::vector<std::unique_ptr<JournalBatch>> passes;
    uint64_t last_write = 0;  // the last write it carries (others ride along)
    std::string value;      // encoded when sent (kept for a retry)
    uint64_t sent_ns = 0;
    bool closed = false;    // a snapshot starts after it: nothing more joins
  };
  void SendFront();
  kj::Promise<void> Send(Group& group);
  void OnAnswer(Result<etcd::TxnResult> result);
  void Acknowledged();
  void Fatal(const Status& status);
  void taskFailed(kj::Exception&& exception) override;

  uvkj::UvAsyncIo& io_;
  etcd::EtcdClient& client_;
  const EtcdJournalOptions options_;
  const std::function<void(const Status&)> on_failure_;
  const std::string leader_key_;
  // Front: the group in flight (when in_flight_); the rest wait, in order.
  std::deque<Group> groups_;
  size_t queued_bytes_ = 0;  // of groups not in flight
  bool in_flight_ = false;
  bool failed_ = false;
  uint64_t durable_ = 0;  // every write up to it is in etcd
  // Barrier()'s waiters: the write each waits for.
  std::deque<std::pair<uint64_t, kj::Own<kj::PromiseFulfiller<void>>>> barriers_;
  uint64_t acknowledged_seq_ = 0;
  EtcdSnapshotWriter* snapshot_writer_ = nullptr;
  reactor::ReplicatorStats stats_;
  kj::TaskSet tasks_{*this};  // last: destroyed first (its tasks refer to the rest)
};

}  // namespace dispatch::ha
