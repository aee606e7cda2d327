// The ClosureOutcomes of a reply (Coordinator.awaitResults, getOutcomes),
// filled without holding the loop for the bytes of their results. The loop
// picks the closures; the stored results among them (rows committed, result
// files: DurableState::LocateStoredResult) are read on the thread pool
// (DurableState::ReadStoredResults) when they come to kOffLoopReadBytes or
// more, and the loop only copies them into the reply once they are back.
// Below that, and for bytes at hand (this pass's results), the loop reads
// them itself: a hop to the pool would cost a small reply more than the read.
// A result that cannot be read intact is never served: its outcome says
// FAILED with the DataLoss that names the closure (the state is left as it
// is; releasing the closure drops what is stored). Any other read error
// fails the call, and the outcome stays the caller's to ask for again.
// REQUIRES: loop thread.
#pragma once

#include <capnp/list.h>
#include <kj/async.h>
#include <kj/function.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"
#include "schema/dispatcher.capnp.h"
#include "state/records.h"

namespace dispatch::reactor {

class ClosureDispatcher;

// NotFound: `closure_id` is not one of the coordinator's outcomes (never
// scheduled, another coordinator's, or released).
Status UnknownClosureError(uint64_t closure_id, uint64_t coordinator_id);

// The trace stamp lists of a reply's traced outcomes (ClosureOutcome.trace),
// stamped up to the report; the caller stamps the commit and the reply.
using TracedLists = std::vector<capnp::List<uint64_t>::Builder>;

// What becomes of an outcome released (by another session of the same
// coordinator) while its reply's results were read.
enum class OnReleased {
  kSkip,      // left out of the reply (awaitResults)
  kNotFound,  // the call fails, as if asked for after the release (getOutcomes)
};

using OutcomeListInit = kj::Function<capnp::List<rpc::ClosureOutcome>::Builder(unsigned)>;

// What FillOutcomes did: filled the reply at once (`now`: the traced
// lists), or started reading results on the pool (`later`).
struct FilledOutcomes {
  std::optional<TracedLists> now;
  // Unless `now`: resolves to the traced lists once the reply is filled;
  // to nullopt when every outcome was released meanwhile (kSkip; `init`
  // not called then).
  kj::Promise<std::optional<TracedLists>> later = nullptr;
};

// Fills the outcomes of `ids` (closures of `coordinator_id`, not released,
// just picked on the loop) into the list `init(n)` makes, n being those
// still there once their results are read, and takes their traces. A reply
// filled at once comes back as `now`, so that its caller can answer in this
// very turn: replies that wait on the same commit then leave in the order
// their calls were answered (a join after the awaitResults that reports
// the closure it waited for, as clients rely on).
FilledOutcomes FillOutcomes(ClosureDispatcher& dispatcher, uint64_t coordinator_id,
                            std::vector<uint64_t> ids, OnReleased on_released,
                            OutcomeListInit init);

}  // namespace dispatch::reactor
