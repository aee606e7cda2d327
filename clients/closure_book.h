// ClosureBook: what a Coordinator knows about its closures, shared by the
// caller's threads (Schedule, Fetch, status) and the coordinator's loop
// thread (which sends schedules and applies replies and outcomes). One mutex
// guards it; nobody holds it across I/O or a wait on the network.
// Invariants: a closure is "unacknowledged" from Add() until the dispatcher
// returned its id (or refused it), and there are at most `window` of them;
// an acknowledged closure whose outcome was fetched (or whose RemoteValue was
// dropped) is released exactly once per dispatcher session that reports it.
// Each outcome reaches the user once: an outcome reported again for a closure
// this book released (a dispatcher restart that lost the release) is dropped
// and released again, and Attach of it is NotFound. The ids of acknowledged
// releases are remembered for that, the latest `max_remembered_releases` of
// them (about 48 bytes each: the id in a deque and in a hash set, 3 MiB at
// the default 65536); older ones are forgotten and counted.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "clients/remote_value.h"
#include "common/status.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

// How a failed closure's error reads: FailedPrecondition "closure N failed: M".
Status ClosureFailedError(uint64_t closure_id, const std::string& message);

// What RemoteValue::Cancel() calls: its Coordinator, while that is open.
class ClosureCanceller {
 public:
  virtual ~ClosureCanceller() = default;
  // Cancels one closure at the dispatcher: its status after the call
  // (kCancelled, or kReady / kFailed for one done before, left as it is).
  virtual Result<RemoteValueStatus> CancelOne(uint64_t closure_id) = 0;
};

struct ClosureCell {
  uint64_t request_id = 0;
  uint64_t closure_id = 0;  // 0 until acknowledged
  RemoteValueStatus status = RemoteValueStatus::kPending;
  std::string result;  // kReady
  Status error;        // kFailed, kCancelled
  bool fetched = false;
  // Dependency bookkeeping (guarded by the book's mutex): closures not yet
  // acknowledged that name this one as an input. Its release (Fetch) waits
  // for them, so the dispatcher has it when their schedule arrives.
  uint32_t unacknowledged_dependants = 0;
  bool release_deferred = false;
  // ScheduleOptions.trace: ClosureOutcome.trace and, last, when the outcome
  // reached the coordinator's loop (kTraceOutcomeReceived). Empty otherwise.
  std::vector<uint64_t> trace;
};

class ClosureBook {
 public:
  // A closure to send in a schedule call.
  struct Outgoing {
    uint64_t sequence;
    uint64_t request_id;
    std::string function;
    std::string args;
    std::vector<uint64_t> resources;
    int32_t priority = 0;
    uint32_t timeout_ms = 0;
    // ClosureSpec.inputs as sent: ids, or kInputInCall + index in the call
    // (filled by TakeUnsent).
    std::vector<uint64_t> inputs = {};
    // ScheduleOptions.trace: when the user scheduled it (0: not traced).
    uint64_t trace_scheduled_ns = 0;
  };

  // What the book counts (for CoordinatorStatus and tests).
  struct Counters {
    // Outcomes reported again for a closure whose outcome the user was
    // already handed (fetched or dropped): not handed out again.
    uint64_t duplicate_outcomes_dropped = 0;
    // Acknowledged releases remembered now, and those forgotten because
    // more than max_remembered_releases were (an outcome of one of those,
    // should a dispatcher ever report it again, is kept like one of an
    // earlier process: for Attach).
    uint64_t releases_remembered = 0;
    uint64_t releases_forgotten = 0;
  };

  static constexpr size_t kDefaultMaxRememberedReleases = 65536;

  // REQUIRES: max_remembered_releases > 0
  ClosureBook(uint32_t window, uint64_t first_request_id,
              size_t max_remembered_releases = kDefaultMaxRememberedReleases)
      : window_(window),
        max_remembered_releases_(max_remembered_releases),
        next_request_id_(first_request_id) {}
  ClosureBook(const ClosureBook&) = delete;
  ClosureBook& operator=(const ClosureBook&) = delete;

  // ---- Caller threads.
  // A fresh idempotency key for a call other than schedule (closures draw
  // theirs from the same sequence).
  uint64_t NextRequestId();
  // Waits while `window` closures are unacknowledged (back-pressure), then
  // records the closure to be sent. Unavailable once closed.
  // `inputs`: cells of this book (ScheduleOptions.inputs); an input that
  // was fetched already (released at the dispatcher) is FailedPrecondition.
  Result<std::shared_ptr<ClosureCell>> Add(std::string function, std::string args,
                                           std::vector<uint64_t> resources, int32_t priority = 0,
                                           uint32_t timeout_ms = 0,
                                           std::vector<std::shared_ptr<ClosureCell>> inputs = {},
                                           uint64_t trace_scheduled_ns = 0);
  // The first error a schedule reply carried, once; ok when there is none.
  Status TakeError();
  // Whether a failed outcome arrived since the last call (the dispatcher may
  // then hold a first error for us).
  bool TakeFailureHint();
  // Waits until nothing is unacknowledged or an error is pending or closed.
  void WaitAcknowledged();
  // Waits until every closure whose RemoteValue is still held has its
  // outcome here, or the book is closed or an error is pending. For Join:
  // the dispatcher's "done" can overtake the reply that carries the last
  // outcomes (one whose results it reads back off its loop).
  void WaitHeldOutcomes();
  size_t unacknowledged() const;
  // The cell of `closure_id`: the live one, one made from an outcome that
  // arrived before anyone asked, a failed one (NotFound) for a closure this
  // book released (its outcome was handed out already), or a new pending one
  // (*lookup set: ask the dispatcher whether it exists).
  std::shared_ptr<ClosureCell> Attach(uint64_t closure_id, bool* lookup);
  void Close();
  Counters counters() const;
  // Set by the Coordinator; held weakly (the Coordinator owns it).
  void SetCanceller(std::weak_ptr<ClosureCanceller> canceller);
  std::shared_ptr<ClosureCanceller> canceller() const;

  // For RemoteValue.
  // Waits until the dispatcher acknowledged the closure: its id. The cell's
  // error when it was never scheduled; Unavailable once closed.
  Result<uint64_t> WaitForId(const ClosureCell& cell);
  uint64_t IdOf(const ClosureCell& cell) const;
  RemoteValueStatus StatusOf(const ClosureCell& cell) const;
  std::vector<uint64_t> TraceOf(const ClosureCell& cell) const;
  Result<std::string> Fetch(ClosureCell& cell, std::optional<std::chrono::milliseconds> timeout);
  // Whether the coordinator closed the book: no outcome arrives any more.
  bool closed() const;

  // ---- Loop thread.
  // Unsent closures in order: at most `max` of them and, beyond the first,
  // at most `max_bytes` of ClosureBytes in all. They stop before a closure
  // with an input whose id is not known yet and that is not earlier in the
  // same list (it goes once that input is acknowledged); a closure whose
  // input was refused fails here, naming it.
  std::vector<Outgoing> TakeUnsent(size_t max, uint64_t max_bytes = UINT64_MAX);
  // What a closure weighs in a schedule call: function, args, 8 per resource.
  static uint64_t ClosureBytes(const std::string& function, const std::string& args,
                               size_t resources, size_t inputs = 0) {
    return function.size() + args.size() + 8 * (resources + inputs);
  }
  bool has_unsent() const;
  // The dispatcher returned `ids` for the closures `sequences` (in order).
  void OnAcknowledged(const std::vector<uint64_t>& sequences, capnp::List<uint64_t>::Reader ids);
  // The dispatcher scheduled none of `sequences`: they end with `why`
  // (Cancelled when the reason was a first error). A non-ok `first_error`
  // becomes the error the next Schedule/Join/Done raises.
  void OnRefused(const std::vector<uint64_t>& sequences, const Status& why,
                 const Status& first_error);
  // A new session: unacknowledged closures go again (same request ids), and
  // releases that were in flight are sent again.
  void OnSessionStart();
  void OnOutcomes(capnp::List<rpc::ClosureOutcome>::Reader outcomes);
  void OnUnknown(uint64_t closure_id, const Status& status);
  std::vector<uint64_t> TakeReleases();
  void OnReleased(const std::vector<uint64_t>& ids);

 private:
  struct Pending {
    Outgoing closure;
    std::shared_ptr<ClosureCell> cell;
    // Its input closures (held: a dropped RemoteValue must not release one
    // before this closure reaches the dispatcher).
    std::vector<std::shared_ptr<ClosureCell>> inputs;
  };
  // REQUIRES: mu_ held. The pending closure left the unacknowledged set:
  // its inputs' deferred releases may go.
  void DropInputs(Pending& pending);
  // REQUIRES: mu_ held.
  uint64_t TakeRequestId();
  // REQUIRES: mu_ held. True if a RemoteValue someone may wait on changed.
  bool ApplyOutcome(rpc::ClosureOutcome::Reader outcome);
  void Release(uint64_t closure_id);
  // REQUIRES: mu_ held. Whether this book released `closure_id` (asked or
  // acknowledged, and still remembered).
  bool Released(uint64_t closure_id) const;
  // REQUIRES: mu_ held. Remembers an acknowledged release, forgetting the
  // oldest past max_remembered_releases_.
  void RememberRelease(uint64_t closure_id);

  const uint32_t window_;
  const size_t max_remembered_releases_;
  mutable std::mutex mu_;  // guards everything below
  // Two, so that an acknowledgement does not wake a Fetch for nothing (a
  // wake-up is a context switch on the critical path of a round trip).
  mutable std::condition_variable room_changed_;     // window room, acknowledgements, first error
  mutable std::condition_variable outcome_changed_;  // a cell's status
  bool closed_ = false;
  uint64_t next_request_id_;
  uint64_t next_sequence_ = 1;
  std::map<uint64_t, Pending> unacknowledged_;  // by sequence: send order
  // The closures sent in this session are those of unacknowledged_ below
  // this sequence (they go in order, and a new session sends all again):
  // TakeUnsent starts here instead of walking past every closure in flight.
  uint64_t first_unsent_ = 0;
  std::unordered_map<uint64_t, std::weak_ptr<ClosureCell>> by_id_;
  std::unordered_map<uint64_t, ClosureCell> orphans_;  // outcomes nobody asked for yet
  std::vector<uint64_t> releases_;                     // to send with the next awaitResults
  std::vector<uint64_t> releases_in_flight_;
  std::set<uint64_t> releasing_;  // in releases_ or in flight: ignore their outcomes
  // Acknowledged releases, oldest first, and the same ids for lookup.
  std::deque<uint64_t> released_order_;
  std::unordered_set<uint64_t> released_;
  Counters counters_;
  Status first_error_;
  bool failure_hint_ = false;
  std::weak_ptr<ClosureCanceller> canceller_;
};

}  // namespace dispatch::clients
