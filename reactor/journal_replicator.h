// JournalReplicator: a second journal that every group commit must reach
// before its replies leave (HA mode: the etcd journal, docs/high_availability.md
// §4), as a durability stage. DurableState commits each batch to its local
// Store first (a cache that the replicated journal rebuilds at every start),
// then tells the replicator of the write with the same batch; the write has
// passed the stage once the batch is durable there. Writes pass in the order
// they were told; a failure is reported once through the failure callback
// the owner gave it (fail-stop).
// This header carries no etcd dependency: the single-node dispatcher never
// constructs a replicator.
// REQUIRES: loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <kj/async.h>

#include "common/status.h"
#include "reactor/durability_stage.h"
#include "reactor/histogram.h"
#include "common/journal_batch.h"
#include "storage/snapshot_file.h"

namespace dispatch::reactor {

// Powers of four, 256 B .. 1 MiB (a transaction's value).
inline std::vector<double> TransactionByteBounds() {
  std::vector<double> bounds;
  for (double b = 256; b <= (1 << 20); b *= 4) bounds.push_back(b);
  return bounds;
}

// What /metrics shows of the replicated journal (dispatch_etcd_journal_*).
struct ReplicatorStats {
  uint64_t transactions = 0;      // transactions acknowledged
  uint64_t transaction_retries = 0;  // transactions sent again after no answer
  uint64_t bytes = 0;             // value bytes acknowledged
  uint64_t records = 0;           // journal records acknowledged
  uint64_t groups_split = 0;      // groups closed early by the batch byte limit
  uint64_t groups_queued_max = 0; // most groups waiting at once
  uint64_t refused_backlog = 0;   // updates refused by Admit
  Histogram transaction_seconds{Histogram::SecondsBounds()};  // sent to acknowledged
  Histogram bytes_per_transaction{TransactionByteBounds()};
  Histogram records_per_transaction{Histogram::CountBounds()};
  // The snapshot in etcd (docs/high_availability.md §5).
  uint64_t snapshots_written = 0;     // snapshots made current in etcd
  uint64_t snapshot_bytes = 0;        // chunk value bytes etcd acknowledged
  uint64_t snapshot_chunks = 0;       // chunk transactions acknowledged
  uint64_t snapshot_failures = 0;     // snapshots given up (the journal keeps everything)
  uint64_t snapshots_skipped = 0;     // local snapshots not sent: one was still going to etcd
  uint64_t snapshot_retries = 0;      // snapshot transactions sent again after no answer
  uint64_t snapshot_keys_deleted = 0; // journal and old chunk keys deleted by the switches
  uint64_t compactions = 0;           // compactions etcd finished (physical)
  uint64_t compaction_failures = 0;
  uint64_t last_snapshot_seq = 0;     // S of the current snapshot in etcd (0: none)
  Histogram snapshot_seconds{Histogram::SecondsBounds()};  // local snapshot recorded -> current in etcd
};

// Written(write, batch, first_seq): `batch` was just committed locally as
// records first_seq ... first_seq + batch->record_count() - 1 (the
// replicator copies what it needs before it returns). Admit(): Unavailable
// naming the limit when too much waits for the replicated journal. Fail():
// nothing more is sent.
class JournalReplicator : public DurabilityStage {
 public:
  // True when nothing told is waiting for the replicated journal.
  virtual bool idle() const = 0;
  virtual const ReplicatorStats& stats() const = 0;

  // Local snapshots, so that the replicated journal can snapshot too and
  // drop what the snapshot covers. SnapshotStarted: right after the commit
  // of record `seq`, a snapshot of the state after it begins (nothing else
  // was committed in between). SnapshotEnded: that snapshot ended,
  // recorded in the local store (`recorded` names its file) or not (null).
  virtual void SnapshotStarted(uint64_t seq) { (void)seq; }
  virtual void SnapshotEnded(uint64_t seq, const storage::SnapshotFileInfo* recorded) {
    (void)seq;
    (void)recorded;
  }
};

}  // namespace dispatch::reactor
