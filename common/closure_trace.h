// The stages of a closure's timestamp trace (ClosureSpec.trace,
// ClosureOutcome.trace): indices into the trace, shared by the Coordinator
// (stages 0, 1 and, on its side, 12, 13), the dispatcher (2, 3, 8..11) and
// the worker (4..7, sent as ClosureReport.trace[0..3]). Stamps are
// CLOCK_MONOTONIC nanoseconds (uv_hrtime and std::chrono::steady_clock read
// that clock on Linux), so stamps of processes on one host compare.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace dispatch {

enum ClosureTraceStage : size_t {
  kTraceScheduled = 0,        // the user called Schedule()
  kTraceScheduleSent = 1,     // the coordinator's loop sent the schedule call
  kTraceDispatcherReceived = 2,
  kTracePushed = 3,           // the runClosures push left the dispatcher
  kTraceWorkerReceived = 4,
  kTraceRunStarted = 5,
  kTraceRunEnded = 6,
  kTraceReportSent = 7,
  kTraceReportReceived = 8,   // the dispatcher handled the report
  kTraceCommitStarted = 9,    // its last commit before the reply
  kTraceCommitEnded = 10,
  kTraceReplied = 11,         // the reply carrying the outcome was released
  kTraceOutcomeReceived = 12, // the coordinator's loop received the outcome
  kTraceWoken = 13,           // the user's Fetch() returned (the caller stamps it)
};

// Stamps on the wire: the caller's in ClosureSpec.trace, the worker's in
// ClosureReport.trace, the dispatcher's whole list in ClosureOutcome.trace.
inline constexpr size_t kTraceClientStamps = 2;
inline constexpr size_t kTraceWorkerStamps = 4;
inline constexpr size_t kTraceOutcomeStamps = 12;
// The whole trace as the Coordinator hands it out (RemoteValue::Trace()).
inline constexpr size_t kTraceStages = 14;

// A stamp: CLOCK_MONOTONIC nanoseconds (what uv_hrtime() returns too).
inline uint64_t TraceNowNanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace dispatch
