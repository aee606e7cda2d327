// DurabilityStage: something every write to the local store must pass before
// the replies that may have observed it leave: the WAL fsync (SyncStage) in
// single-node mode, the etcd journal (HA mode). Writes are numbered by the
// commit pipeline (1, 2, ...: group commits, and the other writes whose
// durability someone waits for, such as a snapshot's record); a stage is
// told of each in order and reports, through its listener, how far every
// write has passed it. Replies are released once every stage has passed
// their write. A stage that can never pass a write again (a failed fsync,
// lost leadership) says so once; the pipeline then fails every waiter.
// REQUIRES: loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "common/journal_batch.h"

namespace dispatch::reactor {

class DurabilityListener {
 public:
  virtual ~DurabilityListener() = default;
  // A stage's durable() moved forward.
  virtual void OnStageAdvanced() = 0;
  // A stage failed for good: fail-stop with `status`.
  virtual void OnStageFailed(const Status& status) = 0;
};

class DurabilityStage {
 public:
  virtual ~DurabilityStage() noexcept(false) = default;

  // Write `write` reached the local store. `batch`: the group commit it is,
  // with its records numbered from `first_seq` (the batch is the caller's
  // and gone after the call: copy what is needed); null for a write that
  // holds no journal records (a snapshot's record in the database).
  // Writes arrive in order, each once.
  virtual void Written(uint64_t write, const JournalBatch* batch, uint64_t first_seq) = 0;
  // Every write numbered up to this has passed the stage.
  virtual uint64_t durable() const = 0;
  // Ok when a new update may be submitted; otherwise the refusal (the
  // stage is too far behind: back-pressure, nothing changes, retry later).
  virtual Status Admit() { return Status::Ok(); }
  // Fail-stop from the pipeline's side: pass nothing more. Idempotent.
  virtual void Fail(const Status& status) { (void)status; }
  // True while the stage has work of its own on the thread pool.
  virtual bool in_flight() const { return false; }

  void SetListener(DurabilityListener* listener) { listener_ = listener; }

 protected:
  DurabilityListener* listener() const { return listener_; }

 private:
  DurabilityListener* listener_ = nullptr;
};

}  // namespace dispatch::reactor
