// Effects: what one applied Update did, said once, by the state that did it.
// DispatcherState::Apply fills them at its choke points (a closure's state
// change, a schedule, a release, a first error, a task's creation, promotion,
// finish or removal), so a consumer (the closure dispatcher, the timings, the
// watchdog, the simulation) reacts to what happened instead of working it out
// again from the update's variant; a new variant that changes a closure's
// state is seen by every consumer without a line of theirs changing.
// Each list is in the order the state made the changes. Plain values: ids,
// never pointers into the state (a later update may release the closure).
#pragma once

#include <cstdint>
#include <vector>

#include "state/records.h"

namespace dispatch::state {

// A closure became finished, failed or cancelled: by an item of its own, or
// because of an input (its waiting dependants), or at once when scheduled
// with a failed or cancelled input.
struct ClosureEnded {
  uint64_t closure_id = 0;
  uint64_t coordinator_id = 0;
  ClosureState outcome = ClosureState::FINISHED;  // FINISHED, FAILED or CANCELLED
  // Failed because its workers used up its runs (never a first error).
  bool infrastructure = false;
  // Failed by the dispatcher because its deadline passed.
  bool deadline_exceeded = false;

  bool operator==(const ClosureEnded&) const = default;
};

// A closure was assigned to a worker slot: run `attempt` starts.
struct RunStarted {
  uint64_t closure_id = 0;
  uint64_t worker_id = 0;
  uint32_t attempt = 0;

  bool operator==(const RunStarted&) const = default;
};

// A run ended and its slot on `worker_id` is free.
struct RunEnded {
  uint64_t closure_id = 0;
  uint64_t worker_id = 0;
  uint32_t attempt = 0;
  // What the closure became: FINISHED, FAILED, CANCELLED, or QUEUED (put back).
  ClosureState outcome = ClosureState::QUEUED;
  // The outcome came from the run: the update names its worker (a result, or
  // a failure its worker reported). False when the dispatcher ended it (a
  // put back, a cancel, a deadline): the workers made no progress.
  bool reported = false;

  bool operator==(const RunEnded&) const = default;
};

// An assigned closure went back to the queue (its worker lost, or a
// transient error to retry).
struct PutBack {
  uint64_t closure_id = 0;
  uint64_t worker_id = 0;
  bool transient = false;

  bool operator==(const PutBack&) const = default;
};

// A coordinator got a pending first error: the failure of `closure_id`.
struct FirstError {
  uint64_t coordinator_id = 0;
  uint64_t closure_id = 0;

  bool operator==(const FirstError&) const = default;
};

struct Effects {
  // The update's time.
  int64_t time_micros = 0;

  // ---- Closures ------------------------------------------------------------
  // New closures, whatever their first state (waiting, queued, or failed at
  // once: then also in `ended`).
  std::vector<uint64_t> scheduled;
  // Closures that entered the queue: new ones, dependants whose inputs all
  // finished, put back ones.
  std::vector<uint64_t> queued;
  std::vector<PutBack> put_back;
  std::vector<RunStarted> runs_started;
  std::vector<RunEnded> runs_ended;
  std::vector<ClosureEnded> ended;
  // Closures forgotten (they were done).
  std::vector<uint64_t> released;
  std::vector<FirstError> first_errors;
  // Coordinators whose pending first error was cleared.
  std::vector<uint64_t> errors_cleared;
  // A waiting or queued closure was assigned or ended: the queue bound
  // (waiting and queued closures) has room it did not have.
  bool queue_shrank = false;

  // ---- Tasks ---------------------------------------------------------------
  // New tasks, active or pending (round robin).
  std::vector<uint64_t> tasks_created;
  // Pending tasks that became active (every consumer accepted their round).
  std::vector<uint64_t> tasks_activated;
  // Tasks marked finished (by their worker, or with their job's collection).
  std::vector<uint64_t> tasks_finished;
  // Tasks forgotten: removed round-robin tasks, pending tasks of a collected job.
  std::vector<uint64_t> tasks_removed;

  // Empties every list, keeping their memory (one Effects serves every update).
  void Clear();
  // True when the update changed nothing listed here.
  bool empty() const;
};

}  // namespace dispatch::state
