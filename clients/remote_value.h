// RemoteValue: the handle Coordinator::Schedule() returns for one closure.
// It shares a ClosureCell with the coordinator's ClosureBook, which the
// coordinator's loop fills when the dispatcher acknowledges the closure and
// when its outcome arrives. status() never blocks; Fetch() waits for the
// outcome and, the first time, asks the coordinator to release the closure
// at the dispatcher. Copyable; every copy is the same closure. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace dispatch::clients {

enum class RemoteValueStatus { kPending, kReady, kFailed, kCancelled };
const char* RemoteValueStatusName(RemoteValueStatus status);

class ClosureBook;
struct ClosureCell;

class RemoteValue {
 public:
  // An empty handle: status() is kCancelled; Fetch() fails FailedPrecondition.
  RemoteValue() = default;
  RemoteValue(std::shared_ptr<ClosureBook> book, std::shared_ptr<ClosureCell> cell)
      : book_(std::move(book)), cell_(std::move(cell)) {}

  // The dispatcher's id for the closure; 0 until it acknowledged the schedule.
  uint64_t closure_id() const;
  // Pending (queued, running, or not yet acknowledged), ready (a result),
  // failed (an error), or cancelled. Never blocks.
  RemoteValueStatus status() const;
  // Waits for the outcome: the result bytes; or the closure's error
  // (FailedPrecondition "closure N failed: ..."); or Cancelled. Unavailable
  // when the coordinator was destroyed before the outcome arrived.
  Result<std::string> Fetch() const;
  // Fetch() that gives up after `timeout` with Unavailable (the closure
  // stays pending; a later Fetch may still succeed).
  Result<std::string> FetchFor(std::chrono::milliseconds timeout) const;

  // Whether its coordinator was closed: a pending closure's outcome can no
  // longer arrive (Fetch() returns Unavailable at once). False when empty.
  bool coordinator_closed() const;
  // Cancels the closure at the dispatcher (waiting first until it was
  // scheduled there), one round trip: a queued one never runs; a running
  // one's worker is told and its late result ignored. Its outcome then
  // arrives as cancelled (Fetch() returns Cancelled). Ok when the closure is
  // cancelled, now or before (idempotent). FailedPrecondition when it had
  // already finished or failed: it is left as it is. NotFound when the
  // dispatcher does not know it (released, or never scheduled); Unavailable
  // once the coordinator is closed. Not the coordinator's first error.
  Status Cancel() const;
  // ScheduleOptions.trace: once the outcome arrived, the closure's stamps,
  // indexed by ClosureTraceStage (common/closure_trace.h) up to
  // kTraceOutcomeReceived (the caller stamps kTraceWoken itself). Empty when
  // not traced, not arrived yet, or the dispatcher dropped the trace.
  std::vector<uint64_t> Trace() const;

 private:
  friend class Coordinator;  // reads the cell of an input (ScheduleOptions.inputs)
  std::shared_ptr<ClosureBook> book_;
  std::shared_ptr<ClosureCell> cell_;
};

}  // namespace dispatch::clients
