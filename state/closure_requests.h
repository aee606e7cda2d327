// Closure requests: a coordinator's schedule, per-worker resource and release
// requests validated against the state (const, all or nothing: a refused
// request changes nothing) and turned into the Updates that carry them out.
// Retries are idempotent by request id: a request id the coordinator used
// before names the closure or resource it made then.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "state/closure_updates.h"
#include "state/dispatcher_state.h"
#include "state/index_util.h"

namespace dispatch::state {

struct SchedulePlan {
  // Per closure of the request, in order: its new id, or the id of the
  // closure its request id made before.
  std::vector<uint64_t> ids;
  UpdateList updates;  // closureBatch.scheduled records of the new closures
  uint64_t num_new = 0;
};
// `closures` as read from the request (their closure_id is ignored). Refused
// with InvalidArgument (no function, a request id twice, an in-call input
// that is not an earlier closure of the call), NotFound (an unknown
// per-worker resource; an input closure that is unknown, another
// coordinator's, or released: gone from the state or in `released`) or
// ResourceExhausted (a closure that alone does not fit one journal record),
// each naming the closure's index.
Result<SchedulePlan> PlanSchedule(const DispatcherState& state, uint64_t coordinator_id,
                                  std::vector<NewClosure> closures, const Stamp& stamp,
                                  const SortedIdSet& released = {});

// A schedule while the coordinator has a pending first error. When no
// closure of the call carries a request id that names one of the
// coordinator's unreleased closures: nullopt (the caller raises the error
// and schedules nothing). Otherwise the call retries one whose reply was
// lost: those closures keep their ids, and the rest are scheduled and
// cancelled at once (the error cancelled the queue they would have joined),
// so the reply names every closure and the coordinator releases every
// outcome; the error waits for its next call. Without this such a retry was
// told "not scheduled" although its closures were queued and ran, and
// their outcomes were never released (found by the simulation, tests/sim,
// pinned seeds 29, 152, 193 and 294). Errors as PlanSchedule's.
Result<std::optional<SchedulePlan>> PlanScheduleRetryUnderError(const DispatcherState& state,
                                                                uint64_t coordinator_id,
                                                                std::vector<NewClosure> closures,
                                                                const Stamp& stamp);

// A schedule call with a request id that a first error refused before
// (RefusedSchedules). When none of its request ids names one of the
// coordinator's unreleased closures: nullopt (the caller repeats the
// refusal and schedules nothing). Otherwise the call merges the refused
// call with others (a client resending every unanswered closure in one call
// after lost replies): known request ids keep their closures, refused ones
// are scheduled and cancelled at once (never run, yet the reply names every
// closure), and the rest are scheduled (and cancelled too under a pending
// first error, as PlanScheduleRetryUnderError does). Errors as PlanSchedule's.
Result<std::optional<SchedulePlan>> PlanScheduleAfterRefusal(
    const DispatcherState& state, uint64_t coordinator_id, std::vector<NewClosure> closures,
    const std::function<bool(uint64_t request_id)>& refused, const Stamp& stamp,
    const SortedIdSet& released = {});

struct ResourcePlan {
  uint64_t resource_id = 0;
  UpdateList updates;  // empty when the request id made it before
};
// InvalidArgument for no function, or a request id that made a resource with
// another function or args.
Result<ResourcePlan> PlanResource(const DispatcherState& state, uint64_t coordinator_id,
                                  std::string_view function, std::string_view args,
                                  uint64_t request_id, const Stamp& stamp);

// The closures of `closure_ids` to release: those not released yet (gone, or
// in `pending`, or listed twice are skipped). NotFound for a closure of
// another coordinator, FailedPrecondition for one not done.
Result<std::vector<uint64_t>> PlanRelease(const DispatcherState& state, uint64_t coordinator_id,
                                          const std::vector<uint64_t>& closure_ids,
                                          const SortedIdSet& pending);

// A flush of the pending releases (`pending`: released by their coordinator,
// not journaled yet). A closure still needed as the input of one not done is
// held: it stays pending and goes with a later flush, after its dependants.
// All lists in id order, as `pending` is: the records list their ids so.
struct ReleaseFlushPlan {
  std::vector<uint64_t> release;  // done and needed by nobody: released now
  std::vector<uint64_t> stored;   // of `release`, those with a row in the result table
  std::vector<uint64_t> held;     // what stays pending
  UpdateList updates;             // closureBatch.released records; empty when release is
};
// Ids no longer in the state (released before) are dropped.
ReleaseFlushPlan PlanReleaseFlush(const DispatcherState& state, const SortedIdSet& pending,
                                  const Stamp& stamp);

// A coordinator's pending first error, taken by the call that raises it: a
// first error is raised once, so `updates` clears it (closureBatch
// errorCleared). nullopt when the coordinator has none.
struct TakenFirstError {
  uint64_t closure_id = 0;
  std::string message;
  UpdateList updates;
};
std::optional<TakenFirstError> PlanTakeFirstError(const DispatcherState& state,
                                                  uint64_t coordinator_id, const Stamp& stamp);

}  // namespace dispatch::state
