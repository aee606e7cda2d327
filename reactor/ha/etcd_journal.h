// EtcdJournal: the HA leader's journal in etcd (docs/high_availability.md §4),
// a durability stage of the commit pipeline (JournalReplicator). Every local
// group commit (pass) is appended to the open group; up to max_in_flight
// groups are in etcd transactions at once (1 today: what accumulates while
// one is in flight goes out as the next single transaction), at most
// kMaxEtcdBatchBytes per value (a pass that would cross it closes the group;
// the next pass starts another). Each transaction:
//   compare create_revision(P/leader) == leader_revision   (fencing)
//           version(P/journal/SEQ) == 0                     (the slot is free)
//   success put P/journal/SEQ = group
//   failure range P/leader, range P/journal/SEQ
// Groups in flight are kept in sequence order; one acknowledged out of order
// waits for those before it, so durable() (the last write etcd holds with
// every write before it) only ever advances in order. The stage keeps no
// reply waiters: the pipeline holds them and asks durable().
// A transaction without an answer (connection failure, timeout) is sent
// again, to the next endpoint, after retry_delay: if the first attempt had
// landed, the slot compare fails and the failure branch shows our own value,
// which counts as acknowledged. A failed compare otherwise (another leader,
// or the slot holds another value) is fencing, and any other error is the
// etcd journal refusing us: both call `on_failure` once (fail-stop, exit
// kExitLeadershipLost), acknowledging nothing of the groups in flight.
// Groups waiting (not yet sent) beyond max_queued_bytes make Admit() refuse
// new updates.
// REQUIRES: loop thread only; the client outlives it.
#pragma once

#include <kj/async.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "reactor/etcd/etcd_client.h"
#include "reactor/ha/ha_limits.h"
#include "reactor/journal_replicator.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::ha {

class EtcdSnapshotWriter;

struct EtcdJournalOptions {
  std::string prefix;           // --ha-prefix: keys are PREFIX/leader, PREFIX/journal/SEQ
  int64_t leader_revision = 0;  // the create revision of PREFIX/leader (our leadership)
  size_t max_group_bytes = kMaxEtcdBatchBytes;
  // Bytes of groups waiting (not in flight) past which Admit() refuses.
  size_t max_queued_bytes = size_t{64} << 20;
  // Transactions in flight at once. More than one needs a standby that
  // tells a gap still being filled from a lost record (issue 55).
  size_t max_in_flight = 1;
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
  bool idle() const override { return in_flight_.empty() && waiting_.empty(); }
  void Fail(const Status& status) override;
  // Resolves once etcd acknowledged every record up to `seq` (at once when
  // it has); rejected when the journal fails. For the snapshot writer, whose
  // switch deletes the journal up to its record.
  kj::Promise<void> WhenAcknowledged(uint64_t seq);
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
    bool acknowledged = false;  // in etcd; waits for those before it
  };
  // Sends waiting groups while fewer than max_in_flight are in flight.
  void SendWaiting();
  kj::Promise<void> Send(Group& group);
  // The group in flight whose first record is `first_seq`; null once gone.
  Group* InFlight(uint64_t first_seq);
  void OnAnswer(uint64_t first_seq, Result<etcd::TxnResult> result);
  void Acknowledged(Group& group);
  void Fatal(const Status& status);
  void taskFailed(kj::Exception&& exception) override;

  uvkj::UvAsyncIo& io_;
  etcd::EtcdClient& client_;
  const EtcdJournalOptions options_;
  const std::function<void(const Status&)> on_failure_;
  const std::string leader_key_;
  // Groups sent, in sequence order (front: the oldest), and groups not sent
  // yet, in order (back: the open group, unless closed). A deque keeps
  // references to its other elements across push_back and pop_front.
  std::deque<Group> in_flight_;
  std::deque<Group> waiting_;
  size_t queued_bytes_ = 0;  // of waiting groups
  bool failed_ = false;
  uint64_t durable_ = 0;  // every write up to it is in etcd
  // WhenAcknowledged()'s waiters: the record each waits for, in order.
  std::deque<std::pair<uint64_t, kj::Own<kj::PromiseFulfiller<void>>>> seq_waiters_;
  uint64_t acknowledged_seq_ = 0;
  EtcdSnapshotWriter* snapshot_writer_ = nullptr;
  reactor::ReplicatorStats stats_;
  kj::TaskSet tasks_{*this};  // last: destroyed first (its tasks refer to the rest)
};

}  // namespace dispatch::ha
