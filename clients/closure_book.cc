#include "clients/closure_book.h"

#include "common/closure_trace.h"

#include <algorithm>

#include "common/closure_limits.h"

namespace dispatch::clients {

const char* RemoteValueStatusName(RemoteValueStatus status) {
  switch (status) {
    case RemoteValueStatus::kPending:
      return "pending";
    case RemoteValueStatus::kReady:
      return "ready";
    case RemoteValueStatus::kFailed:
      return "failed";
    case RemoteValueStatus::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

Status ClosureFailedError(uint64_t closure_id, const std::string& message) {
  return FailedPreconditionError("closure " + std::to_string(closure_id) + " failed: " + message);
}

Result<std::shared_ptr<ClosureCell>> ClosureBook::Add(
    std::string function, std::string args, std::vector<uint64_t> resources, int32_t priority,
    uint32_t timeout_ms, std::vector<std::shared_ptr<ClosureCell>> inputs,
    uint64_t trace_scheduled_ns) {
  std::unique_lock<std::mutex> lock(mu_);
  room_changed_.wait(lock, [this] { return closed_ || unacknowledged_.size() < window_; });
  if (closed_) return UnavailableError("the coordinator is closed");
  for (const auto& input : inputs) {
    if (input->fetched && input->closure_id != 0) {
      return FailedPreconditionError(
          "input closure " + std::to_string(input->closure_id) +
          " was fetched, which released it at the dispatcher: schedule its dependants first");
    }
  }
  for (const auto& input : inputs) ++input->unacknowledged_dependants;
  auto cell = std::make_shared<ClosureCell>();
  cell->request_id = TakeRequestId();
  uint64_t sequence = next_sequence_++;
  Pending pending;
  pending.closure = Outgoing{sequence, cell->request_id, std::move(function), std::move(args),
                             std::move(resources), priority, timeout_ms};
  pending.closure.trace_scheduled_ns = trace_scheduled_ns;
  pending.cell = cell;
  pending.inputs = std::move(inputs);
  unacknowledged_.emplace(sequence, std::move(pending));
  return cell;
}

void ClosureBook::DropInputs(Pending& pending) {
  for (const auto& input : pending.inputs) {
    if (--input->unacknowledged_dependants == 0 && input->release_deferred) {
      input->release_deferred = false;
      Release(input->closure_id);
    }
  }
  pending.inputs.clear();
}

uint64_t ClosureBook::NextRequestId() {
  std::lock_guard<std::mutex> lock(mu_);
  return TakeRequestId();
}

uint64_t ClosureBook::TakeRequestId() {
  uint64_t id = next_request_id_++;
  if (next_request_id_ == 0) next_request_id_ = 1;  // 0 means "no idempotency key"
  return id;
}

Status ClosureBook::TakeError() {
  std::lock_guard<std::mutex> lock(mu_);
  Status error = std::move(first_error_);
  first_error_ = Status::Ok();
  return error;
}

bool ClosureBook::TakeFailureHint() {
  std::lock_guard<std::mutex> lock(mu_);
  bool hint = failure_hint_;
  failure_hint_ = false;
  return hint;
}

void ClosureBook::WaitAcknowledged() {
  std::unique_lock<std::mutex> lock(mu_);
  room_changed_.wait(lock,
                     [this] { return closed_ || !first_error_.ok() || unacknowledged_.empty(); });
}

void ClosureBook::WaitHeldOutcomes() {
  std::unique_lock<std::mutex> lock(mu_);
  outcome_changed_.wait(lock, [this] {
    if (closed_ || !first_error_.ok()) return true;
    for (const auto& [id, weak] : by_id_) {
      std::shared_ptr<ClosureCell> cell = weak.lock();
      if (cell != nullptr && cell->status == RemoteValueStatus::kPending) return false;
    }
    return true;
  });
}

size_t ClosureBook::unacknowledged() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unacknowledged_.size();
}

std::shared_ptr<ClosureCell> ClosureBook::Attach(uint64_t closure_id, bool* lookup) {
  std::lock_guard<std::mutex> lock(mu_);
  *lookup = false;
  auto live = by_id_.find(closure_id);
  if (live != by_id_.end()) {
    if (auto cell = live->second.lock()) return cell;
  }
  auto cell = std::make_shared<ClosureCell>();
  cell->closure_id = closure_id;
  if (Released(closure_id)) {
    // Its outcome was handed out (or its RemoteValue dropped) and released:
    // the dispatcher forgets it, and so does the user's second look.
    cell->status = RemoteValueStatus::kFailed;
    cell->error = NotFoundError("closure " + std::to_string(closure_id) +
                                " was released by this coordinator (fetched, or its "
                                "RemoteValue dropped): its outcome is handed out once");
    cell->fetched = true;  // nothing to release
    return cell;
  }
  auto orphan = orphans_.find(closure_id);
  if (orphan != orphans_.end()) {
    *cell = std::move(orphan->second);
    orphans_.erase(orphan);
  } else {
    *lookup = true;
  }
  by_id_[closure_id] = cell;
  return cell;
}

void ClosureBook::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  room_changed_.notify_all();
  outcome_changed_.notify_all();
}

void ClosureBook::SetCanceller(std::weak_ptr<ClosureCanceller> canceller) {
  std::lock_guard<std::mutex> lock(mu_);
  canceller_ = std::move(canceller);
}

std::shared_ptr<ClosureCanceller> ClosureBook::canceller() const {
  std::lock_guard<std::mutex> lock(mu_);
  return canceller_.lock();
}

Result<uint64_t> ClosureBook::WaitForId(const ClosureCell& cell) {
  std::unique_lock<std::mutex> lock(mu_);
  room_changed_.wait(lock, [&] {
    return closed_ || cell.closure_id != 0 || cell.status != RemoteValueStatus::kPending;
  });
  if (cell.closure_id != 0) return cell.closure_id;
  if (cell.status != RemoteValueStatus::kPending) return cell.error;
  return UnavailableError("the coordinator was closed before the closure was scheduled");
}

uint64_t ClosureBook::IdOf(const ClosureCell& cell) const {
  std::lock_guard<std::mutex> lock(mu_);
  return cell.closure_id;
}

RemoteValueStatus ClosureBook::StatusOf(const ClosureCell& cell) const {
  std::lock_guard<std::mutex> lock(mu_);
  return cell.status;
}

std::vector<uint64_t> ClosureBook::TraceOf(const ClosureCell& cell) const {
  std::lock_guard<std::mutex> lock(mu_);
  return cell.trace;
}

Result<std::string> ClosureBook::Fetch(ClosureCell& cell,
                                       std::optional<std::chrono::milliseconds> timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [&] { return closed_ || cell.status != RemoteValueStatus::kPending; };
  if (timeout) {
    if (!outcome_changed_.wait_for(lock, *timeout, done)) {
      return UnavailableError("closure " + std::to_string(cell.closure_id) +
                              " has no outcome after " + std::to_string(timeout->count()) + " ms");
    }
  } else {
    outcome_changed_.wait(lock, done);
  }
  if (cell.status == RemoteValueStatus::kPending) {
    return UnavailableError("the coordinator was closed before closure " +
                            std::to_string(cell.closure_id) + " had an outcome");
  }
  if (!cell.fetched) {
    cell.fetched = true;
    if (cell.closure_id != 0) {
      by_id_.erase(cell.closure_id);
      if (cell.unacknowledged_dependants > 0) {
        cell.release_deferred = true;  // DropInputs releases it
      } else {
        Release(cell.closure_id);
      }
    }
  }
  if (cell.status == RemoteValueStatus::kReady) return cell.result;
  return cell.error;
}

bool ClosureBook::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

std::vector<ClosureBook::Outgoing> ClosureBook::TakeUnsent(size_t max, uint64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Outgoing> out;
  std::vector<const ClosureCell*> out_cells;  // out[i]'s cell: in-call inputs
  uint64_t bytes = 0;
  bool failed = false;
  auto it = unacknowledged_.lower_bound(first_unsent_);
  while (it != unacknowledged_.end()) {
    Pending& pending = it->second;
    if (out.size() >= max) break;
    Outgoing& c = pending.closure;
    const uint64_t size = ClosureBytes(c.function, c.args, c.resources.size(), pending.inputs.size());
    if (!out.empty() && bytes + size > max_bytes) break;  // the next call takes it, in order
    // Inputs: an id, or a closure earlier in this call; else wait for it.
    c.inputs.clear();
    bool ready = true;
    std::string refused;
    for (const auto& input : pending.inputs) {
      if (input->closure_id != 0) {
        c.inputs.push_back(input->closure_id);
        continue;
      }
      if (input->status != RemoteValueStatus::kPending) {
        refused = input->error.ToString();
        break;
      }
      auto in_call = std::find(out_cells.begin(), out_cells.end(), input.get());
      if (in_call == out_cells.end()) {
        ready = false;  // in a call not answered yet
        break;
      }
      c.inputs.push_back(kInputInCall + static_cast<uint64_t>(in_call - out_cells.begin()));
    }
    if (!refused.empty()) {
      // Its input was never scheduled: it cannot be either.
      pending.cell->status = RemoteValueStatus::kFailed;
      pending.cell->error =
          FailedPreconditionError("an input of this closure was not scheduled: " + refused);
      DropInputs(pending);
      it = unacknowledged_.erase(it);
      failed = true;
      continue;
    }
    if (!ready) break;  // in order: the rest waits too
    bytes += size;
    out.push_back(c);
    out_cells.push_back(pending.cell.get());
    ++it;
  }
  first_unsent_ = it == unacknowledged_.end() ? next_sequence_ : it->first;
  if (failed) {
    room_changed_.notify_all();
    outcome_changed_.notify_all();
  }
  return out;
}

bool ClosureBook::has_unsent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unacknowledged_.lower_bound(first_unsent_) != unacknowledged_.end();
}

void ClosureBook::OnAcknowledged(const std::vector<uint64_t>& sequences,
                                 capnp::List<uint64_t>::Reader ids) {
  bool outcomes = false;  // a cell got its outcome (or failed) here
  std::unique_lock<std::mutex> lock(mu_);
  for (size_t i = 0; i < sequences.size() && i < ids.size(); ++i) {
    auto it = unacknowledged_.find(sequences[i]);
    if (it == unacknowledged_.end()) continue;  // acknowledged already (a resend)
    std::shared_ptr<ClosureCell> cell = std::move(it->second.cell);
    DropInputs(it->second);
    unacknowledged_.erase(it);
    uint64_t id = ids[i];
    cell->closure_id = id;
    // Its outcome may have come first (the reply was lost, the session was not).
    auto orphan = orphans_.find(id);
    if (orphan != orphans_.end()) {
      cell->status = orphan->second.status;
      cell->result = std::move(orphan->second.result);
      cell->error = std::move(orphan->second.error);
      cell->trace = std::move(orphan->second.trace);
      orphans_.erase(orphan);
      outcomes = true;
    }
    by_id_[id] = cell;
  }
  // A reply with fewer ids than closures would leave the rest waiting forever.
  for (size_t i = ids.size(); i < sequences.size(); ++i) {
    auto it = unacknowledged_.find(sequences[i]);
    if (it == unacknowledged_.end()) continue;
    it->second.cell->status = RemoteValueStatus::kFailed;
    it->second.cell->error =
        InternalError("the dispatcher returned " + std::to_string(ids.size()) +
                      " ids for a schedule of " + std::to_string(sequences.size()) + " closures");
    DropInputs(it->second);
    unacknowledged_.erase(it);
    outcomes = true;
  }
  lock.unlock();
  room_changed_.notify_all();
  if (outcomes) outcome_changed_.notify_all();
}

void ClosureBook::OnRefused(const std::vector<uint64_t>& sequences, const Status& why,
                            const Status& first_error) {
  std::unique_lock<std::mutex> lock(mu_);
  for (uint64_t sequence : sequences) {
    auto it = unacknowledged_.find(sequence);
    if (it == unacknowledged_.end()) continue;
    ClosureCell& cell = *it->second.cell;
    cell.status = why.code() == StatusCode::kCancelled ? RemoteValueStatus::kCancelled
                                                       : RemoteValueStatus::kFailed;
    cell.error = why;
    DropInputs(it->second);
    unacknowledged_.erase(it);
  }
  if (!first_error.ok()) first_error_ = first_error;
  lock.unlock();
  room_changed_.notify_all();
  outcome_changed_.notify_all();
}

void ClosureBook::OnSessionStart() {
  std::lock_guard<std::mutex> lock(mu_);
  first_unsent_ = 0;  // all of them go again
  releases_.insert(releases_.begin(), releases_in_flight_.begin(), releases_in_flight_.end());
  releases_in_flight_.clear();
}

void ClosureBook::OnOutcomes(capnp::List<rpc::ClosureOutcome>::Reader outcomes) {
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto outcome : outcomes) changed |= ApplyOutcome(outcome);
  }
  if (changed) outcome_changed_.notify_all();
}

bool ClosureBook::ApplyOutcome(rpc::ClosureOutcome::Reader outcome) {
  uint64_t id = outcome.getClosureId();
  ClosureCell done;
  done.closure_id = id;
  switch (outcome.getState()) {
    case rpc::ClosureState::FINISHED: {
      auto bytes = outcome.getResult();
      done.status = RemoteValueStatus::kReady;
      done.result.assign(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
      break;
    }
    case rpc::ClosureState::FAILED:
      done.status = RemoteValueStatus::kFailed;
      done.error = ClosureFailedError(id, outcome.getError().cStr());
      if (outcome.getDeadlineExceeded()) done.error = DeadlineExceededError(done.error.message());
      break;
    case rpc::ClosureState::CANCELLED: {
      done.status = RemoteValueStatus::kCancelled;
      std::string why = outcome.getError().cStr();
      done.error = CancelledError("closure " + std::to_string(id) + " was cancelled" +
                                  (why.empty() ? "" : ": " + why));
      break;
    }
    default:
      return false;  // queued or running: nothing to record yet
  }
  if (outcome.hasTrace()) {
    for (uint64_t stamp : outcome.getTrace()) done.trace.push_back(stamp);
    done.trace.resize(kTraceOutcomeStamps);
    done.trace.push_back(TraceNowNanos());  // kTraceOutcomeReceived
  }
  if (releasing_.count(id) > 0) {
    ++counters_.duplicate_outcomes_dropped;  // fetched already; its release is on its way
    return false;
  }
  if (released_.count(id) > 0) {
    // Released and acknowledged, yet reported again: the dispatcher lost the
    // release (it was held back for a dependant, and the dispatcher
    // restarted). Not handed out again; released again so it forgets it.
    ++counters_.duplicate_outcomes_dropped;
    Release(id);
    return false;
  }
  auto live = by_id_.find(id);
  if (live != by_id_.end()) {
    std::shared_ptr<ClosureCell> cell = live->second.lock();
    if (!cell) {
      // Nobody holds its RemoteValue any more: nobody can fetch it.
      by_id_.erase(live);
      Release(id);
      return false;
    }
    if (cell->status != RemoteValueStatus::kPending) return false;  // a session resent it
    if (done.status == RemoteValueStatus::kFailed) failure_hint_ = true;
    cell->status = done.status;
    cell->result = std::move(done.result);
    cell->error = std::move(done.error);
    cell->trace = std::move(done.trace);
    return true;
  }
  // Scheduled by an earlier process (or its acknowledgement is still on the
  // way): kept for Attach() or OnAcknowledged().
  if (done.status == RemoteValueStatus::kFailed) failure_hint_ = true;
  orphans_[id] = std::move(done);
  return false;  // nobody can be waiting on it yet
}

void ClosureBook::OnUnknown(uint64_t closure_id, const Status& status) {
  std::unique_lock<std::mutex> lock(mu_);
  auto live = by_id_.find(closure_id);
  if (live == by_id_.end()) return;
  if (auto cell = live->second.lock()) {
    if (cell->status == RemoteValueStatus::kPending) {
      cell->status = RemoteValueStatus::kFailed;
      cell->error = status;
      cell->fetched = true;  // nothing to release
    }
  }
  by_id_.erase(live);
  lock.unlock();
  outcome_changed_.notify_all();
}

void ClosureBook::Release(uint64_t closure_id) {
  if (releasing_.insert(closure_id).second) releases_.push_back(closure_id);
}

std::vector<uint64_t> ClosureBook::TakeReleases() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  out.swap(releases_);
  releases_in_flight_.insert(releases_in_flight_.end(), out.begin(), out.end());
  return out;
}

void ClosureBook::OnReleased(const std::vector<uint64_t>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<uint64_t> done(ids.begin(), ids.end());
  releases_in_flight_.erase(std::remove_if(releases_in_flight_.begin(), releases_in_flight_.end(),
                                           [&](uint64_t id) { return done.count(id) > 0; }),
                            releases_in_flight_.end());
  for (uint64_t id : ids) {
    releasing_.erase(id);
    RememberRelease(id);
  }
}

bool ClosureBook::Released(uint64_t closure_id) const {
  return releasing_.count(closure_id) > 0 || released_.count(closure_id) > 0;
}

void ClosureBook::RememberRelease(uint64_t closure_id) {
  if (!released_.insert(closure_id).second) return;  // released again: remembered already
  released_order_.push_back(closure_id);
  while (released_order_.size() > max_remembered_releases_) {
    released_.erase(released_order_.front());
    released_order_.pop_front();
    ++counters_.releases_forgotten;
  }
}

ClosureBook::Counters ClosureBook::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters counters = counters_;
  counters.releases_remembered = released_order_.size();
  return counters;
}

}  // namespace dispatch::clients
