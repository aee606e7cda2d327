#include "reactor/outcome_reply.h"

#include <map>
#include <string>
#include <utility>

#include "common/closure_trace.h"
#include "common/log.h"
#include "reactor/closure_dispatcher.h"
#include "reactor/copy_in_turns.h"
#include "reactor/service_util.h"

namespace dispatch::reactor {
namespace {

// Fills `out` from `closure`; `read(dest)` puts a finished closure's result
// into the reply's buffer for it (zeros on an error). DataLoss: the outcome
// is FAILED with it; another error fails the call (see the header).
template <typename ReadFn>
void FillOne(const state::Closure& closure, rpc::ClosureOutcome::Builder out, ReadFn&& read) {
  out.setClosureId(closure.id);
  out.setState(closure.state);
  out.setAttempts(closure.attempts);
  if (closure.state == state::ClosureState::FINISHED) {
    auto data = out.initResult(static_cast<unsigned>(ResultStore::ResultSize(closure)));
    Status status = read(reinterpret_cast<char*>(data.begin()));
    if (!status.ok()) {
      if (status.code() != StatusCode::kDataLoss) ThrowStatus(status);
      Log(LogLevel::kError, "not serving closure ", closure.id, ": ", status.ToString().c_str());
      out.disownResult();
      out.setState(state::ClosureState::FAILED);
      out.setError(status.ToString());
    }
  }
  if (closure.state == state::ClosureState::FAILED) {
    out.setError(closure.error);
    out.setUserError(closure.user_error);
    // A failed closure keeps its deadline only when that failed it.
    out.setDeadlineExceeded(closure.deadline_micros != 0);
  }
}

void TakeTrace(ClosureTraces& traces, uint64_t closure_id, rpc::ClosureOutcome::Builder out,
               TracedLists& traced) {
  if (traces.empty()) return;
  std::optional<ClosureTraces::Stamps> stamps = traces.Take(closure_id);
  if (!stamps.has_value()) return;
  auto list = out.initTrace(kTraceOutcomeStamps);
  for (unsigned s = 0; s < kTraceOutcomeStamps; ++s) list.set(s, (*stamps)[s]);
  traced.push_back(list);
}

// The outcomes of `ids` still there: done, the coordinator's, not released.
std::vector<const state::Closure*> StillThere(ClosureDispatcher& dispatcher,
                                              uint64_t coordinator_id,
                                              const std::vector<uint64_t>& ids,
                                              OnReleased on_released) {
  std::vector<const state::Closure*> there;
  for (uint64_t id : ids) {
    const state::Closure* closure = dispatcher.state().FindClosure(id);
    if (closure != nullptr && closure->coordinator_id == coordinator_id &&
        !dispatcher.ReleasePending(id)) {
      there.push_back(closure);
    } else if (on_released == OnReleased::kNotFound) {
      ThrowStatus(UnknownClosureError(id, coordinator_id));
    }
  }
  return there;
}

}  // namespace

Status UnknownClosureError(uint64_t closure_id, uint64_t coordinator_id) {
  return NotFoundError("closure " + std::to_string(closure_id) + " of coordinator " +
                       std::to_string(coordinator_id) +
                       " is unknown (never scheduled, or released)");
}

FilledOutcomes FillOutcomes(ClosureDispatcher& dispatcher, uint64_t coordinator_id,
                            std::vector<uint64_t> ids, OnReleased on_released,
                            OutcomeListInit init) {
  DurableState& durable = dispatcher.durable();
  std::vector<const state::Closure*> closures =
      StillThere(dispatcher, coordinator_id, ids, on_released);
  std::vector<storage::ResultLocation> locations;
  std::vector<const state::Closure*> unlocated;  // finished, bytes at hand (or none)
  uint64_t stored = 0;
  for (const state::Closure* closure : closures) {
    if (closure->state != state::ClosureState::FINISHED) continue;
    std::optional<storage::ResultLocation> location = durable.results().LocateStoredResult(*closure);
    if (!location.has_value()) {
      unlocated.push_back(closure);
      continue;
    }
    stored += location->size;
    locations.push_back(*location);
  }
  if (stored < kOffLoopReadBytes) {
    FilledOutcomes filled;
    if (closures.empty()) {
      filled.later = std::optional<TracedLists>();
      return filled;
    }
    auto list = init(static_cast<unsigned>(closures.size()));
    TracedLists traced;
    for (unsigned i = 0; i < closures.size(); ++i) {
      const state::Closure& closure = *closures[i];
      FillOne(closure, list[i], [&](char* dest) { return durable.results().ReadResult(closure, dest); });
      TakeTrace(dispatcher.traces(), closure.id, list[i], traced);
    }
    filled.now = kj::mv(traced);
    return filled;
  }
  // The bytes at hand now (this pass's results) may be committed by the time
  // the read is back, and then be rows to read on the loop: copied now.
  std::map<uint64_t, Result<std::string>> at_hand;
  for (const state::Closure* closure : unlocated) {
    at_hand.emplace(closure->id, durable.results().GetResult(*closure));
  }
  std::map<uint64_t, size_t> read_index;  // closure id -> its item in the read
  for (size_t i = 0; i < locations.size(); ++i) read_index[locations[i].closure_id] = i;
  FilledOutcomes filled;
  filled.later = durable.results().ReadStoredResults(kj::mv(locations))
      .then([owner = kj::addRef(dispatcher), coordinator_id, ids = kj::mv(ids), on_released,
             init = kj::mv(init), at_hand = kj::mv(at_hand), read_index = kj::mv(read_index)](
                std::unique_ptr<ResultReads::Done> done) mutable
            -> kj::Promise<std::optional<TracedLists>> {
        ClosureDispatcher& dispatcher = *owner;
        DurableState& durable = dispatcher.durable();
        std::vector<const state::Closure*> closures =
            StillThere(dispatcher, coordinator_id, ids, on_released);
        if (closures.empty()) return std::optional<TracedLists>();
        // One that finished meanwhile (getOutcomes asks for running ones
        // too) has a stored result nobody read: all over again.
        for (const state::Closure* closure : closures) {
          if (closure->state == state::ClosureState::FINISHED &&
              !read_index.contains(closure->id) && !at_hand.contains(closure->id) &&
              durable.results().LocateStoredResult(*closure).has_value()) {
            FilledOutcomes again =
                FillOutcomes(dispatcher, coordinator_id, kj::mv(ids), on_released, kj::mv(init));
            if (again.now.has_value()) return std::optional<TracedLists>(kj::mv(again.now));
            return kj::mv(again.later);
          }
        }
        auto list = init(static_cast<unsigned>(closures.size()));
        TracedLists traced;
        std::vector<PendingCopy> copies;
        for (unsigned i = 0; i < closures.size(); ++i) {
          const state::Closure& closure = *closures[i];
          FillOne(closure, list[i], [&](char* dest) -> Status {
            const uint64_t size = ResultStore::ResultSize(closure);
            auto read = read_index.find(closure.id);
            if (read != read_index.end()) {
              // Not released (StillThere), so held.
              Status status =
                  durable.results().HeldResultRead(closure.id, size, done->statuses[read->second]);
              if (status.ok()) {
                copies.push_back({dest, done->bytes.data() + done->offsets[read->second], size});
              }
              return status;
            }
            auto copy = at_hand.find(closure.id);
            // Bytes at hand, or none (an empty result).
            if (copy == at_hand.end()) return durable.results().ReadResult(closure, dest);
            if (!copy->second.ok()) return copy->second.status();
            copies.push_back({dest, copy->second->data(), size});
            return Status::Ok();
          });
          TakeTrace(dispatcher.traces(), closure.id, list[i], traced);
        }
        // The sources live until the copies are done; the reply, until the
        // call's promise resolves.
        return CopyInTurns(std::move(copies))
            .attach(std::move(done), std::move(at_hand))
            .then([traced = kj::mv(traced)]() mutable {
              return std::optional<TracedLists>(kj::mv(traced));
            });
      });
  return filled;
}

}  // namespace dispatch::reactor
