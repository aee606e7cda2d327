// ClosureTraces: the dispatcher's stamps of the closures whose schedule asked
// for a trace (ClosureSpec.trace), from the schedule call to the awaitResults
// reply that carries the outcome (ClosureOutcome.trace). Diagnosis only: in
// memory, never journaled, lost on a restart, and bounded: at most `max`
// closures are traced at a time; a trace asked for beyond that is dropped
// and counted (the closure runs as any other). A trace ends when its outcome
// is handed out or its closure released. With nothing traced (the common
// case) every hook is one empty() test.
// REQUIRES: loop thread only.
#pragma once

#include <capnp/list.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "common/closure_trace.h"

namespace dispatch::reactor {

class ClosureTraces {
 public:
  using Stamps = std::array<uint64_t, kTraceOutcomeStamps>;
  static constexpr size_t kMaxTraced = 4096;

  explicit ClosureTraces(size_t max = kMaxTraced) : max_(max) {}

  bool empty() const { return traces_.empty(); }
  size_t size() const { return traces_.size(); }
  // Traces asked for and dropped because `max` were held.
  uint64_t dropped() const { return dropped_; }

  // A traced closure was scheduled: the caller's stamps (at most the first
  // kTraceClientStamps are kept) and when the dispatcher handled the call.
  // A closure traced already (a retried schedule) keeps its trace.
  void Start(uint64_t closure_id, capnp::List<uint64_t>::Reader client, uint64_t received_ns);
  bool Traced(uint64_t closure_id) const { return traces_.contains(closure_id); }
  // Sets one stage's stamp of a traced closure; nothing for another one.
  void Stamp(uint64_t closure_id, ClosureTraceStage stage, uint64_t ns);
  // The worker's stamps of its report (at most kTraceWorkerStamps) and when
  // the dispatcher handled the report.
  void OnReport(uint64_t closure_id, capnp::List<uint64_t>::Reader worker, uint64_t received_ns);
  // Ends the trace, returning it (nullopt when the closure is not traced).
  std::optional<Stamps> Take(uint64_t closure_id);
  void Forget(uint64_t closure_id) { traces_.erase(closure_id); }

 private:
  const size_t max_;
  std::unordered_map<uint64_t, Stamps> traces_;
  uint64_t dropped_ = 0;
};

}  // namespace dispatch::reactor
