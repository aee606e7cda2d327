// CommitPipeline: the state behind the durability barrier. Every change
// goes validate -> journal -> apply: Submit sizes an Update, checks it
// against the state, applies it (so later requests of the same loop pass
// see it) and appends its record to the pass's batch; CommitPass writes the
// whole batch as one transaction of the journal (group commit). Every write
// gets the next write number and must then pass each durability stage
// (durability_stage.h: the WAL fsync when the store defers it, the etcd
// journal in HA mode); a reply parked on Barrier() leaves once every stage
// has passed the write that covers what it may have observed. A hold delays
// a commit by a bounded time so that work due within a few passes joins it;
// a commit gate (a checkpoint about to restart the WAL) delays it until the
// gate opens. A failed commit or stage is fail-stop: every parked reply
// fails, nothing is acknowledged again, and the fatal handler is told once.
// No event loop of its own: time comes from the injected Clock, the journal
// through storage::JournalWriter, so the simulation runs it as it is.
// REQUIRES: one thread (the loop's).
#pragma once

#include <kj/async.h>
#include <kj/function.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/journal_batch.h"
#include "common/status.h"
#include "reactor/clock.h"
#include "reactor/durability_stage.h"
#include "reactor/durable_waiters.h"
#include "reactor/histogram.h"
#include "schema/journal.capnp.h"
#include "state/dispatcher_state.h"
#include "state/effects.h"
#include "storage/journal_writer.h"

namespace dispatch::reactor {

struct CommitPipelineOptions {
  // A pass whose batch (records and what they store) would grow past this
  // many bytes commits what it holds first, so that one transaction, and
  // the memory its batch pins, stays bounded however many large updates
  // arrive in one loop pass. One update larger than this commits alone.
  uint64_t max_batch_bytes = 64u << 20;
  // Appended to the refusal of an update larger than a journal record, to
  // say where the limit comes from (HA mode: one etcd transaction).
  std::string record_limit_reason = {};
};

// TEST-ONLY: bugs the simulation plants in the shipping pipeline to prove
// that its checker notices them (tests/sim, SimBug). Every field defaults
// to off; nothing but the simulation sets one.
struct CommitPipelineTesting {
  // Replies leave before their updates are committed: Barrier and
  // WhenDurable release at once.
  bool reply_before_commit = false;
  // An update that released closures (Effects::released) is applied but
  // its record is left out of the batch: never journaled.
  bool unjournaled_release = false;
};

struct CommitStats {
  uint64_t commits = 0;           // group commits (transactions) written
  uint64_t records = 0;           // updates journaled
  uint64_t max_batch = 0;         // most updates in one commit
  uint64_t refused_for_size = 0;  // updates refused: larger than a journal record
  uint64_t early_commits = 0;     // commits made mid-pass at max_batch_bytes
};

class CommitPipeline {
 public:
  // `state`: the recovered state, exactly the journal's (nothing pending).
  CommitPipeline(storage::JournalWriter& journal, const Clock& clock, CommitPipelineOptions options,
                 state::DispatcherState state);
  CommitPipeline(const CommitPipeline&) = delete;
  CommitPipeline& operator=(const CommitPipeline&) = delete;

  const state::DispatcherState& state() const { return state_; }
  const Clock& clock() const { return clock_; }
  // The one clock of the state: wall-clock microseconds (times survive a
  // restart), never earlier than the last applied update's time.
  int64_t NowMicros() const;

  // ---- Submitting ---------------------------------------------------------
  // Sizes `update`, validates it, applies it and appends its record to the
  // pass's batch. An update whose record would pass the journal's
  // max_record_bytes is ResourceExhausted naming the update, its size and
  // the limit; a stage may refuse it for back-pressure (Admit); a rejected
  // update (that or the Check error) changes nothing and journals nothing.
  // When the record would take the batch past max_batch_bytes, the batch
  // commits first (a commit failure then fails this Submit). After a
  // failure every Submit fails with it.
  Status Submit(journal::Update::Reader update);
  // The same with the update's journal bytes made already (from the message
  // it was built in: UpdateList::EncodedIfOneSegment). REQUIRES: `encoded`
  // decodes to `update`. Bytes past the record limit are compacted
  // (EncodeUpdate) before the update is refused for its size.
  Status Submit(journal::Update::Reader update, std::string encoded);
  // Submit's size check alone, for a handler that must know before it
  // changes anything else (e.g. before removing a worker's old registration).
  Status CheckFits(journal::Update::Reader update) const;
  // Commits the batch now when `bytes` more would take it past
  // max_batch_bytes; the commit's failure, if any. Submit does this for its
  // own record; what stores more beside a record (a dataset definition, a
  // result) calls it first with both sizes.
  Status MakeRoom(size_t bytes);
  // The journal's limit on one record, for builders of list-shaped updates
  // that cut their lists to fit (state/record_budget.h).
  size_t max_record_bytes() const { return journal_.max_record_bytes(); }
  // The pass's batch, for the stores that put definitions and results in
  // the same transaction as the records naming them. REQUIRES: the update
  // naming what is put was just submitted (nothing commits in between).
  JournalBatch& batch() { return batch_; }

  // ---- Replies ------------------------------------------------------------
  // Resolves when everything submitted so far is durable: at once when
  // nothing is pending, else once every stage has passed the write covering
  // it. Every reply waits on it, reads included (a read may have observed
  // an update that is applied but not yet durable). Rejected after a failure.
  kj::Promise<void> Barrier();
  // Barrier's form for a driver without a KJ event loop (the simulation):
  // runs `action` once everything submitted so far is durable, at once when
  // it is; never after a failure, nor when the pipeline is destroyed first.
  // Actions parked on one batch run in the order they were parked.
  void WhenDurable(kj::Function<void()> action);
  // Runs `action` once everything written so far has passed every stage (at
  // once when it has; never after a failure). It waits for writes, not for
  // the pass's batch.
  void WhenWrittenDurable(kj::Function<void()> action);
  // A write that is not a group commit (a snapshot's record in the
  // database): it gets the next write number and `group` waits for it.
  void NoteOtherWrite(DurableWaiters group);
  // Every stage has passed every write.
  bool all_written_durable() const { return DurableThrough() == written_; }

  // ---- Committing ---------------------------------------------------------
  // Commits the pass's batch, unless a hold is on (until its deadline) or
  // the commit gate is closed (until it opens and this is called again).
  void CommitPass();
  // Ends any hold and commits now, even with the gate closed: shutdown, a
  // batch at its bound, and callers that drive the state without turning
  // the loop (benches, tests).
  void CommitNow();
  // Holds the commit for at most `micros` (measured from the first hold of a
  // batch; later holds do not extend it), so that work expected within a few
  // loop passes joins the same transaction: a closure pushed to a worker
  // before its assignment commits, whose report then commits with it. Replies
  // still leave only after the commit: a hold delays them, never skips it.
  void HoldCommit(uint64_t micros);
  // Ends the hold; the next pass end commits.
  void ReleaseHold() { hold_deadline_ns_ = 0; }
  bool holding() const { return hold_deadline_ns_ != 0; }
  // Monotonic nanoseconds the hold ends at (0: no hold).
  uint64_t hold_deadline_ns() const { return hold_deadline_ns_; }
  // True while the pass's batch holds something not written yet.
  bool pending() const { return !batch_.empty(); }

  // ---- Wiring (before the first Submit) -----------------------------------
  // Adds a stage every write must pass, told of writes after those before it.
  void AddStage(DurabilityStage* stage);
  // While `closed()` is true, CommitPass commits nothing; CommitNow commits
  // anyway and then calls `overridden()` (the gate's owner gives up what
  // it held the commits for).
  void SetCommitGate(std::function<bool()> closed, std::function<void()> overridden) {
    gate_closed_ = std::move(closed);
    gate_overridden_ = std::move(overridden);
  }
  // Told when a hold starts (true) and when no hold is on any more (false):
  // the owner keeps a timer that calls CommitPass while a hold is on, so an
  // expired hold commits even when the loop has nothing else to do.
  void SetHoldTimer(std::function<void(bool on)> timer) { hold_timer_ = std::move(timer); }
  // Called whenever the pass's batch was emptied: right after a successful
  // commit (what it put is readable from the journal's store now) and at
  // fail-stop (it is gone). The stores forget what they put in it.
  void AddBatchListener(std::function<void()> listener) {
    batch_listeners_.push_back(std::move(listener));
  }
  // Told of every update Submit applied that did something effects list
  // (state/effects.h), right after it applied: the closure dispatcher, the
  // metrics that time transitions, the watchdog. An update with empty
  // effects (a split, a dataset) reaches none of them. They read effects,
  // never the update's variant. Called in the order added. An observer must
  // not Submit, nor add or remove observers.
  using ObserverId = uint64_t;
  ObserverId AddAppliedObserver(std::function<void(const state::Effects&)> observer);
  void RemoveAppliedObserver(ObserverId id);
  // TEST-ONLY (CommitPipelineTesting): plants a bug for the simulation.
  void SetTesting(CommitPipelineTesting testing) { testing_ = testing; }
  // Called once at fail-stop, after every parked reply failed.
  void SetFatalHandler(std::function<void(const Status&)> handler) {
    on_fatal_ = std::move(handler);
  }

  // ---- Failure --------------------------------------------------------------
  // Fail-stop: parked replies fail, stages stop, the fatal handler is told.
  // `what` starts the log line. Idempotent (the first status stays).
  void FailStop(const Status& status, const char* what = "journal commit failed");
  bool failed() const { return !failure_.ok(); }
  const Status& failure() const { return failure_; }

  // ---- Figures --------------------------------------------------------------
  const CommitStats& stats() const { return stats_; }
  // One group commit's write (with its fsync unless that is deferred).
  const Histogram& commit_seconds() const { return commit_seconds_; }
  const Histogram& records_per_commit() const { return records_per_commit_; }
  // When the last successful commit started and ended (monotonic
  // nanoseconds; 0 before the first): closure traces.
  uint64_t last_commit_start_ns() const { return last_commit_start_ns_; }
  uint64_t last_commit_end_ns() const { return last_commit_end_ns_; }

  // Replaces the whole state (a reset at start-up). REQUIRES: nothing pending.
  void ReplaceState(state::DispatcherState state);

 private:
  struct StageListener final : DurabilityListener {
    explicit StageListener(CommitPipeline& owner) : owner(owner) {}
    void OnStageAdvanced() override { owner.ReleaseDurable(); }
    void OnStageFailed(const Status& status) override {
      owner.FailStop(status, "a durability stage failed");
    }
    CommitPipeline& owner;
  };

  Status SubmitRecord(journal::Update::Reader update, std::string bytes);
  // The refusal of an update whose record takes `bytes`; ok when it fits.
  Status CheckRecordBytes(journal::Update::Reader update, size_t bytes) const;
  // Writes the batch now. REQUIRES: !failed(), batch not empty.
  void CommitBatch();
  // A write reached the journal: it gets the next write number, `group`
  // waits for it, and every stage is told (`batch`: the group commit it
  // is, null for another write). Then releases what is durable.
  void NoteWrite(DurableWaiters group, const JournalBatch* batch, uint64_t first_seq);
  // The last write every stage has passed (written_ when there is none).
  uint64_t DurableThrough() const;
  // Releases the waiting groups every stage has passed.
  void ReleaseDurable();
  // The group waiting for the last write, made if need be.
  DurableWaiters& LastWriteGroup();

  storage::JournalWriter& journal_;
  const Clock& clock_;
  const CommitPipelineOptions options_;
  state::DispatcherState state_;
  JournalBatch batch_;
  // Replies parked on this pass's batch, not written yet. They get a write
  // number only when the batch commits, never earlier: a write numbered
  // before (a snapshot's record, while the batch waited for its commit) may
  // become durable before the batch is even written, so it must not release
  // them. (Found by the power-loss suite: replies released before their
  // records were even written.)
  DurableWaiters batch_waiters_;
  uint64_t written_ = 0;  // the last write numbered
  // Groups waiting for their write to pass every stage, by write number.
  std::deque<std::pair<uint64_t, DurableWaiters>> waiting_;
  std::vector<DurabilityStage*> stages_;
  StageListener stage_listener_{*this};
  uint64_t hold_deadline_ns_ = 0;  // 0: no hold
  std::function<bool()> gate_closed_;
  std::function<void()> gate_overridden_;
  std::function<void(bool)> hold_timer_;
  std::vector<std::function<void()>> batch_listeners_;
  std::vector<std::pair<ObserverId, std::function<void(const state::Effects&)>>> applied_observers_;
  ObserverId next_observer_id_ = 1;
  bool notifying_ = false;  // inside the applied observers
  // The effects of the update being submitted, kept for its memory.
  state::Effects effects_;
  std::function<void(const Status&)> on_fatal_;
  CommitPipelineTesting testing_;
  Status failure_;
  CommitStats stats_;
  Histogram commit_seconds_{Histogram::SecondsBounds()};
  Histogram records_per_commit_{Histogram::CountBounds()};
  uint64_t last_commit_start_ns_ = 0;
  uint64_t last_commit_end_ns_ = 0;
};

// Update encoding for the journal: a flat Cap'n Proto message.
std::string EncodeUpdate(journal::Update::Reader update);

}  // namespace dispatch::reactor
