// Closures: a durable FIFO of scheduled functions, each assigned to one worker
// at a time (one attempt), finished / failed / cancelled exactly once, and kept
// until released. Reports carry (worker, attempt): one from an earlier attempt
// is refused. A coordinator's first failure is held until cleared.

#include <algorithm>
#include <set>
#include <cstdint>
#include <string>
#include <utility>

#include "state/bytes.h"
#include "state/closure_updates.h"
#include "state/dispatcher_state.h"
#include "state/index_util.h"

namespace dispatch::state {

namespace {

std::string ClosureName(uint64_t id) { return "closure " + std::to_string(id); }

Status WrongState(const Closure& closure, const char* wanted) {
  return FailedPreconditionError(ClosureName(closure.id) + " is " +
                                 ClosureStateName(closure.state) + ", not " + wanted);
}

// Most bytes of the error a dependant gets from its failed input: a chain
// of failures must not grow the text one level at a time. The front names
// the input; the end, the failure where the chain broke.
constexpr size_t kMaxInputErrorBytes = 1024;

std::string InputFailedError(const Closure& input) {
  std::string text = "input " + ClosureName(input.id);
  if (input.state == ClosureState::CANCELLED) return text + " was cancelled";
  text += " failed: " + input.error;
  if (text.size() <= kMaxInputErrorBytes) return text;
  constexpr std::string_view kCut = " ... ";
  const size_t front = 256;
  const size_t back = kMaxInputErrorBytes - front - kCut.size();
  return text.substr(0, front) + std::string(kCut) + text.substr(text.size() - back);
}

}  // namespace

Status DispatcherState::CheckClosureScheduled(journal::ClosureScheduled::Reader u,
                                              const ScheduledSoFar& batch) const {
  const uint64_t id = u.getClosureId();
  if (id == 0) return InvalidArgumentError("closure id 0 is reserved");
  if (id == UINT64_MAX) {
    return InvalidArgumentError("closure id " + std::to_string(id) +
                                " is the largest: the next closure id would wrap to 0");
  }
  // Every closure's id is below next_closure_id_ (CheckReferences), so only
  // an id below it can name one.
  if (id < next_closure_id_) {
    if (closures_.contains(id)) return AlreadyExistsError(ClosureName(id) + " already exists");
    return InvalidArgumentError(ClosureName(id) + " reuses an id below the next closure id " +
                                std::to_string(next_closure_id_));
  }
  if (u.getFunctionName().size() == 0)
    return InvalidArgumentError(ClosureName(id) + " has no function name");
  for (uint64_t resource : ResourcesOf(u)) {
    if (!resources_.contains(resource)) {
      return NotFoundError(ClosureName(id) + " uses unknown per-worker resource " +
                           std::to_string(resource));
    }
  }
  for (uint64_t input : InputsOf(u)) {
    auto earlier = std::lower_bound(batch.ids.begin(), batch.ids.end(), input);
    if (earlier != batch.ids.end() && *earlier == input &&
        batch.coordinators[earlier - batch.ids.begin()] == u.getCoordinatorId()) {
      continue;  // an earlier item of the batch
    }
    const Closure* closure = FindClosure(input);
    if (closure == nullptr || closure->coordinator_id != u.getCoordinatorId() || input >= id) {
      return NotFoundError(ClosureName(id) + " needs input " + ClosureName(input) +
                           ", which is no earlier closure of coordinator " +
                           std::to_string(u.getCoordinatorId()));
    }
  }
  if (u.getRequestId() != 0) {
    const Closure* earlier = FindClosureByRequest(u.getCoordinatorId(), u.getRequestId());
    if (earlier != nullptr) {
      return AlreadyExistsError("coordinator " + std::to_string(u.getCoordinatorId()) +
                                " request " + std::to_string(u.getRequestId()) +
                                " already scheduled " + ClosureName(earlier->id));
    }
  }
  return Status::Ok();
}

void DispatcherState::ApplyClosureScheduled(journal::ClosureScheduled::Reader u, int64_t now) {
  Closure closure;
  closure.id = u.getClosureId();
  closure.coordinator_id = u.getCoordinatorId();
  closure.request_id = u.getRequestId();
  closure.function_name = ToString(u.getFunctionName());
  closure.args = ToString(u.getArgs());
  closure.scheduled_micros = now;
  closure.priority = u.getPriority();
  closure.deadline_micros = u.getDeadlineMicros();
  for (uint64_t resource : ResourcesOf(u)) closure.resources.push_back(resource);
  // Waiting while an input is not finished; failed at once when one failed
  // or was cancelled already (as if that had happened now).
  const Closure* failed_input = nullptr;
  closure.state = ClosureState::QUEUED;
  for (uint64_t input_id : InputsOf(u)) {
    closure.inputs.push_back(input_id);
    const Closure& input = closures_.at(input_id);
    if (input.state == ClosureState::FAILED || input.state == ClosureState::CANCELLED) {
      if (failed_input == nullptr) failed_input = &input;
    } else if (input.state != ClosureState::FINISHED) {
      closure.state = ClosureState::WAITING;
    }
  }
  if (failed_input != nullptr) {
    closure.state = ClosureState::FAILED;
    closure.error = InputFailedError(*failed_input);
    closure.done_micros = now;
    std::string().swap(closure.args);
  }
  if (closure.state == ClosureState::QUEUED) Enqueue(closure);
  if (effects_ != nullptr) {
    effects_->scheduled.push_back(closure.id);
    if (closure.state == ClosureState::QUEUED) effects_->queued.push_back(closure.id);
    if (closure.state == ClosureState::FAILED)
      effects_->ended.push_back({closure.id, closure.coordinator_id, ClosureState::FAILED});
  }
  if (!IsClosureDone(closure.state)) {
    CountUp(indexes_.unfinished_by_coordinator, closure.coordinator_id);
    for (uint64_t input : closure.inputs) AddToIndex(indexes_.needed_by, input, closure.id);
  }
  AddToIndex(indexes_.closures_by_coordinator, closure.coordinator_id, closure.id);
  ++indexes_.closures_in_state[ClosureStateSlot(closure.state)];
  if (closure.request_id != 0) {
    indexes_.closure_by_request.emplace(std::make_pair(closure.coordinator_id, closure.request_id),
                                        closure.id);
  }
  if (closure.deadline_micros != 0 && !IsClosureDone(closure.state))
    indexes_.closure_deadlines.emplace(closure.deadline_micros, closure.id);
  next_closure_id_ = closure.id + 1;
  closures_.emplace(closure.id, std::move(closure));
}

void DispatcherState::Enqueue(Closure& closure) {
  closure.queue_position = next_queue_position_++;
  auto kind = indexes_.queue_by_kind.find(closure);
  if (kind == indexes_.queue_by_kind.end()) {
    kind = indexes_.queue_by_kind
               .emplace(ClosureKind{closure.function_name, closure.resources},
                        KindQueue())
               .first;
  }
  // Positions only grow: at one priority the new closure goes last, which
  // the hint makes O(1) (any other place is found as without it).
  kind->second.emplace_hint(kind->second.end(), QueueKey{closure.priority, closure.queue_position},
                            closure.id);
}

void DispatcherState::Dequeue(Closure& closure) {
  auto kind = indexes_.queue_by_kind.find(closure);
  kind->second.erase(QueueKey{closure.priority, closure.queue_position});
  if (kind->second.empty()) indexes_.queue_by_kind.erase(kind);
  closure.queue_position = 0;
}

void DispatcherState::RecordTransition(const Closure& closure, ClosureState state) {
  Effects& effects = *effects_;
  const ClosureState from = closure.state;
  if (from == ClosureState::ASSIGNED) {
    effects.runs_ended.push_back(
        {closure.id, closure.worker_id, closure.attempts, state, transition_.reported});
  }
  if (state == ClosureState::ASSIGNED)
    effects.runs_started.push_back({closure.id, closure.worker_id, closure.attempts});
  if (state == ClosureState::QUEUED) effects.queued.push_back(closure.id);
  if (IsClosureDone(state)) {
    effects.ended.push_back({closure.id, closure.coordinator_id, state, transition_.infrastructure,
                             transition_.deadline_exceeded});
  }
  const auto in_queue = [](ClosureState s) {
    return s == ClosureState::QUEUED || s == ClosureState::WAITING;
  };
  if (in_queue(from) && !in_queue(state)) effects.queue_shrank = true;
}

void DispatcherState::SetClosureState(Closure& closure, ClosureState state) {
  if (effects_ != nullptr) RecordTransition(closure, state);
  --indexes_.closures_in_state[ClosureStateSlot(closure.state)];
  if (closure.state == ClosureState::QUEUED) Dequeue(closure);
  if (closure.state == ClosureState::ASSIGNED) {
    RemoveFromIndex(indexes_.closures_by_worker, closure.worker_id, closure.id);
  }
  if (IsClosureDone(state)) {
    CountDown(indexes_.unfinished_by_coordinator, closure.coordinator_id);
    for (uint64_t input : closure.inputs) RemoveFromIndex(indexes_.needed_by, input, closure.id);
    // A done closure never runs again: its args would only take memory
    // while its outcome waits to be fetched.
    std::string().swap(closure.args);
    // Nor can it time out (ApplyClosureFailed puts back the deadline of one
    // failed by it).
    if (closure.deadline_micros != 0) {
      indexes_.closure_deadlines.erase(std::make_pair(closure.deadline_micros, closure.id));
      closure.deadline_micros = 0;
    }
  }
  closure.state = state;
  ++indexes_.closures_in_state[ClosureStateSlot(state)];
  if (state == ClosureState::QUEUED) Enqueue(closure);
  if (state == ClosureState::ASSIGNED) {
    AddToIndex(indexes_.closures_by_worker, closure.worker_id, closure.id);
  } else {
    closure.worker_id = 0;
  }
}

Status DispatcherState::CheckAssignedTo(uint64_t closure_id, uint64_t worker_id,
                                        uint32_t attempt) const {
  const Closure* closure = FindClosure(closure_id);
  if (closure == nullptr) return NotFoundError(ClosureName(closure_id) + " is unknown");
  if (closure->state != ClosureState::ASSIGNED) return WrongState(*closure, "assigned");
  if (closure->worker_id != worker_id || closure->attempts != attempt) {
    return FailedPreconditionError(
        ClosureName(closure_id) + " runs as attempt " + std::to_string(closure->attempts) +
        " on worker " + std::to_string(closure->worker_id) + ", not as attempt " +
        std::to_string(attempt) + " on worker " + std::to_string(worker_id));
  }
  return Status::Ok();
}

Status DispatcherState::CheckClosureAssigned(journal::ClosureAssigned::Reader u) const {
  const Closure* closure = FindClosure(u.getClosureId());
  if (closure == nullptr) return NotFoundError(ClosureName(u.getClosureId()) + " is unknown");
  if (closure->state != ClosureState::QUEUED) return WrongState(*closure, "queued");
  if (!workers_.contains(u.getWorkerId())) {
    return NotFoundError(ClosureName(closure->id) + " is assigned to unknown worker " +
                         std::to_string(u.getWorkerId()));
  }
  if (u.getAttempt() != closure->attempts + 1) {
    return FailedPreconditionError(ClosureName(closure->id) + " has had " +
                                   std::to_string(closure->attempts) + " attempts; the next is " +
                                   std::to_string(closure->attempts + 1) + ", not " +
                                   std::to_string(u.getAttempt()));
  }
  return Status::Ok();
}

void DispatcherState::ApplyClosureAssigned(journal::ClosureAssigned::Reader u) {
  Closure& closure = closures_.at(u.getClosureId());
  closure.attempts = u.getAttempt();
  closure.worker_id = u.getWorkerId();
  SetClosureState(closure, ClosureState::ASSIGNED);
}

Status DispatcherState::CheckClosureFinished(journal::ClosureFinished::Reader u) const {
  DISPATCH_RETURN_IF_ERROR(CheckAssignedTo(u.getClosureId(), u.getWorkerId(), u.getAttempt()));
  if (u.getResultStored() && u.getResult().size() != 0) {
    return InvalidArgumentError(ClosureName(u.getClosureId()) +
                                " has a stored result and inline result bytes too");
  }
  return Status::Ok();
}

void DispatcherState::ApplyClosureFinished(journal::ClosureFinished::Reader u, int64_t now) {
  Closure& closure = closures_.at(u.getClosureId());
  closure.result = ToString(u.getResult());
  closure.result_stored = u.getResultStored();
  closure.result_size = u.getResultStored() ? u.getResultSize() : 0;
  closure.result_crc = u.getResultStored() ? u.getResultCrc() : 0;
  closure.done_micros = now;
  transition_ = Transition{.reported = true};
  SetClosureState(closure, ClosureState::FINISHED);
  transition_ = Transition();
  ResolveDependants(closure.id, now);
}

Status DispatcherState::CheckNotDone(uint64_t closure_id) const {
  const Closure* closure = FindClosure(closure_id);
  if (closure == nullptr) return NotFoundError(ClosureName(closure_id) + " is unknown");
  if (IsClosureDone(closure->state)) return WrongState(*closure, "waiting, queued or assigned");
  return Status::Ok();
}

Status DispatcherState::CheckDone(uint64_t closure_id) const {
  const Closure* closure = FindClosure(closure_id);
  if (closure == nullptr) return NotFoundError(ClosureName(closure_id) + " is unknown");
  if (!IsClosureDone(closure->state)) return WrongState(*closure, "finished, failed or cancelled");
  return Status::Ok();
}

Status DispatcherState::CheckClosureFailed(journal::ClosureFailed::Reader u) const {
  if (u.getWorkerId() != 0) {
    DISPATCH_RETURN_IF_ERROR(CheckAssignedTo(u.getClosureId(), u.getWorkerId(), u.getAttempt()));
  } else {
    DISPATCH_RETURN_IF_ERROR(CheckNotDone(u.getClosureId()));
  }
  if (u.getError().size() == 0) {
    return InvalidArgumentError("the failure of " + ClosureName(u.getClosureId()) +
                                " has no error message");
  }
  if (u.getDeadlineExceeded() &&
      (u.getWorkerId() != 0 || FindClosure(u.getClosureId())->deadline_micros == 0)) {
    return InvalidArgumentError("the dispatcher fails " + ClosureName(u.getClosureId()) +
                                " by its deadline, but it has none or the failure names a worker");
  }
  return Status::Ok();
}

void DispatcherState::ApplyClosureFailed(journal::ClosureFailed::Reader u, int64_t now) {
  Closure& closure = closures_.at(u.getClosureId());
  closure.error = ToString(u.getError());
  closure.user_error = u.getUserError();
  closure.done_micros = now;
  const int64_t deadline = closure.deadline_micros;
  transition_ = Transition{.reported = u.getWorkerId() != 0,
                           .infrastructure = u.getInfrastructure(),
                           .deadline_exceeded = u.getDeadlineExceeded()};
  SetClosureState(closure, ClosureState::FAILED);
  transition_ = Transition();
  if (u.getDeadlineExceeded()) {
    // Kept, so that the outcome says why (a snapshot carries it as well).
    // The caller's timeout is not the coordinator's first error, but its
    // waiting dependants fail with it as with any failure (found by the
    // simulation: they used to wait for ever).
    closure.deadline_micros = deadline;
  } else if (!u.getInfrastructure() && !coordinator_errors_.contains(closure.coordinator_id)) {
    coordinator_errors_.emplace(closure.coordinator_id,
                                CoordinatorError{closure.id, closure.error});
    if (effects_ != nullptr) effects_->first_errors.push_back({closure.coordinator_id, closure.id});
  }
  ResolveDependants(closure.id, now);
}

void DispatcherState::MarkCancelled(uint64_t closure_id, int64_t now) {
  Closure& closure = closures_.at(closure_id);
  closure.done_micros = now;
  SetClosureState(closure, ClosureState::CANCELLED);
}

void DispatcherState::ResolveDependants(uint64_t closure_id, int64_t now) {
  // Most closures have no dependants: no work list for them.
  if (!indexes_.needed_by.contains(closure_id)) return;
  // A work list, not recursion: a chain of a million closures may fail at once.
  std::vector<uint64_t> work{closure_id};
  while (!work.empty()) {
    const Closure& input = closures_.at(work.back());
    work.pop_back();
    auto needed = indexes_.needed_by.find(input.id);
    if (needed == indexes_.needed_by.end()) continue;
    std::vector<uint64_t> waiting;  // copied: moving them on edits the index
    for (uint64_t id : needed->second) {
      if (closures_.at(id).state == ClosureState::WAITING) waiting.push_back(id);
    }
    for (uint64_t id : waiting) {
      Closure& dependant = closures_.at(id);
      if (input.state == ClosureState::FINISHED) {
        bool ready = true;
        for (uint64_t other : dependant.inputs)
          ready = ready && closures_.at(other).state == ClosureState::FINISHED;
        if (!ready) continue;
        if (!coordinator_errors_.contains(dependant.coordinator_id)) {
          SetClosureState(dependant, ClosureState::QUEUED);
          continue;
        }
        // As a put back is while its coordinator has a pending first error.
        dependant.done_micros = now;
        SetClosureState(dependant, ClosureState::CANCELLED);
      } else {
        dependant.error = InputFailedError(input);
        dependant.user_error = false;
        dependant.done_micros = now;
        SetClosureState(dependant, ClosureState::FAILED);
      }
      work.push_back(id);
    }
  }
}

std::vector<uint64_t> DispatcherState::WaitingDependants(
    const std::vector<uint64_t>& closure_ids) const {
  std::set<uint64_t> found;
  std::vector<uint64_t> work(closure_ids.begin(), closure_ids.end());
  while (!work.empty()) {
    auto needed = indexes_.needed_by.find(work.back());
    work.pop_back();
    if (needed == indexes_.needed_by.end()) continue;
    for (uint64_t id : needed->second) {
      if (closures_.at(id).state == ClosureState::WAITING && found.insert(id).second)
        work.push_back(id);
    }
  }
  return std::vector<uint64_t>(found.begin(), found.end());
}

Status DispatcherState::CheckClosurePutBack(journal::ClosurePutBack::Reader u) const {
  return CheckAssignedTo(u.getClosureId(), u.getWorkerId(), u.getAttempt());
}

void DispatcherState::ApplyClosurePutBack(journal::ClosurePutBack::Reader u) {
  Closure& closure = closures_.at(u.getClosureId());
  if (u.getTransient()) ++closure.transient_failures;
  if (effects_ != nullptr)
    effects_->put_back.push_back({closure.id, closure.worker_id, u.getTransient()});
  SetClosureState(closure, ClosureState::QUEUED);
}

void DispatcherState::ReleaseClosure(uint64_t closure_id) {
  const Closure& closure = closures_.at(closure_id);
  if (effects_ != nullptr) effects_->released.push_back(closure_id);
  --indexes_.closures_in_state[ClosureStateSlot(closure.state)];
  RemoveFromIndex(indexes_.closures_by_coordinator, closure.coordinator_id, closure.id);
  if (closure.request_id != 0)
    indexes_.closure_by_request.erase(std::make_pair(closure.coordinator_id, closure.request_id));
  closures_.erase(closure_id);
}

Status DispatcherState::CheckCoordinatorErrorCleared(
    journal::CoordinatorErrorCleared::Reader u) const {
  if (!coordinator_errors_.contains(u.getCoordinatorId())) {
    return NotFoundError("coordinator " + std::to_string(u.getCoordinatorId()) +
                         " has no pending error");
  }
  return Status::Ok();
}

void DispatcherState::ApplyCoordinatorErrorCleared(journal::CoordinatorErrorCleared::Reader u) {
  coordinator_errors_.erase(u.getCoordinatorId());
  if (effects_ != nullptr) effects_->errors_cleared.push_back(u.getCoordinatorId());
}

Status DispatcherState::CheckResourceCreated(journal::ResourceCreated::Reader u) const {
  const uint64_t id = u.getResourceId();
  const std::string name = "per-worker resource " + std::to_string(id);
  if (id == 0) return InvalidArgumentError("per-worker resource id 0 is reserved");
  if (id == UINT64_MAX) {
    return InvalidArgumentError("per-worker resource id " + std::to_string(id) +
                                " is the largest: the next per-worker resource id would wrap to 0");
  }
  if (resources_.contains(id)) return AlreadyExistsError(name + " already exists");
  if (id < next_resource_id_) {
    return InvalidArgumentError(name + " reuses an id below the next resource id " +
                                std::to_string(next_resource_id_));
  }
  if (u.getFunctionName().size() == 0) return InvalidArgumentError(name + " has no function name");
  if (u.getRequestId() != 0) {
    const PerWorkerResource* earlier =
        FindResourceByRequest(u.getCoordinatorId(), u.getRequestId());
    if (earlier != nullptr) {
      return AlreadyExistsError("coordinator " + std::to_string(u.getCoordinatorId()) +
                                " request " + std::to_string(u.getRequestId()) +
                                " already created per-worker resource " +
                                std::to_string(earlier->id));
    }
  }
  return Status::Ok();
}

void DispatcherState::ApplyResourceCreated(journal::ResourceCreated::Reader u) {
  PerWorkerResource resource;
  resource.id = u.getResourceId();
  resource.coordinator_id = u.getCoordinatorId();
  resource.function_name = ToString(u.getFunctionName());
  resource.args = ToString(u.getArgs());
  resource.request_id = u.getRequestId();
  if (resource.request_id != 0) {
    indexes_.resource_by_request.emplace(
        std::make_pair(resource.coordinator_id, resource.request_id), resource.id);
  }
  next_resource_id_ = resource.id + 1;
  resources_.emplace(resource.id, std::move(resource));
}

namespace {

uint64_t IdOfItem(auto item) { return item.getClosureId(); }
uint64_t IdOfItem(uint64_t id) { return id; }

// The items of a batch must name distinct closures: each is checked against
// the state before the batch, which only holds when no item sees another's
// effect.
template <typename Items>
Status CheckDistinct(Items items) {
  std::vector<uint64_t> ids;
  ids.reserve(items.size());
  for (auto item : items) ids.push_back(IdOfItem(item));
  if (std::optional<uint64_t> twice = RepeatedId(std::move(ids)))
    return InvalidArgumentError("a closure batch names " + ClosureName(*twice) + " twice");
  return Status::Ok();
}

}  // namespace

Status DispatcherState::CheckClosureBatch(journal::ClosureBatch::Reader u) const {
  switch (u.which()) {
    case journal::ClosureBatch::SCHEDULED: {
      std::vector<std::pair<uint64_t, uint64_t>> requests;
      uint64_t previous = 0;
      ScheduledSoFar batch;
      for (auto item : u.getScheduled()) {
        DISPATCH_RETURN_IF_ERROR(CheckClosureScheduled(item, batch));
        // Increasing ids keep the next closure id moving forward item by item.
        if (item.getClosureId() <= previous) {
          return InvalidArgumentError("a closure batch schedules " +
                                      ClosureName(item.getClosureId()) + " after " +
                                      ClosureName(previous) + ": ids must increase");
        }
        previous = item.getClosureId();
        batch.ids.push_back(previous);
        batch.coordinators.push_back(item.getCoordinatorId());
        // Read what Apply reads, so that a damaged item fails here, before
        // any item of the batch is applied.
        (void)item.getArgs();
        if (item.getRequestId() != 0)
          requests.emplace_back(item.getCoordinatorId(), item.getRequestId());
      }
      if (auto twice = RepeatedId(std::move(requests))) {
        return InvalidArgumentError("a closure batch repeats request " +
                                    std::to_string(twice->second) + " of coordinator " +
                                    std::to_string(twice->first));
      }
      return Status::Ok();
    }
    case journal::ClosureBatch::ASSIGNED:
      DISPATCH_RETURN_IF_ERROR(CheckDistinct(u.getAssigned()));
      for (auto item : u.getAssigned()) {
        DISPATCH_RETURN_IF_ERROR(CheckClosureAssigned(item));
      }
      return Status::Ok();
    case journal::ClosureBatch::FINISHED:
      DISPATCH_RETURN_IF_ERROR(CheckDistinct(u.getFinished()));
      for (auto item : u.getFinished()) {
        DISPATCH_RETURN_IF_ERROR(CheckClosureFinished(item));
        (void)item.getResult();  // read before any item is applied (see above)
      }
      return Status::Ok();
    case journal::ClosureBatch::CANCELLED:
      DISPATCH_RETURN_IF_ERROR(CheckDistinct(u.getCancelled()));
      for (uint64_t id : u.getCancelled()) {
        DISPATCH_RETURN_IF_ERROR(CheckNotDone(id));
      }
      return Status::Ok();
    case journal::ClosureBatch::RELEASED:
      DISPATCH_RETURN_IF_ERROR(CheckDistinct(u.getReleased()));
      for (uint64_t id : u.getReleased()) {
        DISPATCH_RETURN_IF_ERROR(CheckDone(id));
        if (IsNeededAsInput(id)) {
          return FailedPreconditionError(
              ClosureName(id) + " is an input of " +
              ClosureName(*indexes_.needed_by.at(id).begin()) +
              ", which is not done: it is released after its dependants");
        }
      }
      return Status::Ok();
  }
  return InvalidArgumentError("closure batch holds unknown kind " +
                              std::to_string(static_cast<unsigned>(u.which())));
}

void DispatcherState::ApplyClosureBatch(journal::ClosureBatch::Reader u, int64_t now) {
  switch (u.which()) {
    case journal::ClosureBatch::SCHEDULED:
      for (auto item : u.getScheduled()) ApplyClosureScheduled(item, now);
      return;
    case journal::ClosureBatch::ASSIGNED:
      for (auto item : u.getAssigned()) ApplyClosureAssigned(item);
      return;
    case journal::ClosureBatch::FINISHED:
      for (auto item : u.getFinished()) ApplyClosureFinished(item, now);
      return;
    case journal::ClosureBatch::CANCELLED:
      // Every item is cancelled before any dependant moves on: a closure
      // cancelled with its input is cancelled, as its caller was told
      // (PlanCancel's states), not failed by that input (found by the
      // simulation).
      for (uint64_t id : u.getCancelled()) MarkCancelled(id, now);
      for (uint64_t id : u.getCancelled()) ResolveDependants(id, now);
      return;
    case journal::ClosureBatch::RELEASED:
      for (uint64_t id : u.getReleased()) ReleaseClosure(id);
      return;
  }
}

const PerWorkerResource* DispatcherState::FindResource(uint64_t resource_id) const {
  auto it = resources_.find(resource_id);
  return it == resources_.end() ? nullptr : &it->second;
}

std::vector<const Closure*> DispatcherState::ClosuresInIdOrder() const {
  std::vector<const Closure*> sorted;
  sorted.reserve(closures_.size());
  for (const auto& [id, c] : closures_) sorted.push_back(&c);
  std::sort(sorted.begin(), sorted.end(),
            [](const Closure* a, const Closure* b) { return a->id < b->id; });
  return sorted;
}

const Closure* DispatcherState::FindClosure(uint64_t closure_id) const {
  auto it = closures_.find(closure_id);
  return it == closures_.end() ? nullptr : &it->second;
}

Result<const Closure*> DispatcherState::GetClosure(uint64_t closure_id) const {
  const Closure* closure = FindClosure(closure_id);
  if (closure == nullptr) return NotFoundError(ClosureName(closure_id) + " is unknown");
  return closure;
}

std::vector<const Closure*> DispatcherState::ClosuresInState(ClosureState state, size_t max) const {
  std::vector<const Closure*> out;
  if (state == ClosureState::QUEUED) {
    // The queue is kept by kind (for the planner): merged here, a query for
    // tools and tests.
    std::vector<std::pair<QueueKey, uint64_t>> queue;  // place, id
    for (const auto& [kind, positions] : indexes_.queue_by_kind)
      queue.insert(queue.end(), positions.begin(), positions.end());
    std::sort(queue.begin(), queue.end());
    for (const auto& [place, id] : queue) {
      if (out.size() >= max) break;
      out.push_back(&closures_.at(id));
    }
    return out;
  }
  std::vector<uint64_t> ids;
  if (state == ClosureState::ASSIGNED) {
    for (const auto& [worker, on_worker] : indexes_.closures_by_worker)
      ids.insert(ids.end(), on_worker.begin(), on_worker.end());
  } else {
    for (const auto& [id, closure] : closures_)
      if (closure.state == state) ids.push_back(id);
  }
  const size_t keep = std::min(max, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end());
  for (size_t i = 0; i < keep; ++i) out.push_back(&closures_.at(ids[i]));
  return out;
}

size_t DispatcherState::NumClosuresInState(ClosureState state) const {
  return indexes_.closures_in_state[ClosureStateSlot(state)];
}

size_t DispatcherState::NumClosuresOnWorker(uint64_t worker_id) const {
  auto it = indexes_.closures_by_worker.find(worker_id);
  return it == indexes_.closures_by_worker.end() ? 0 : it->second.size();
}

const Closure* DispatcherState::NextQueuedClosure() const {
  const std::pair<const QueueKey, uint64_t>* front = nullptr;
  for (const auto& [kind, positions] : indexes_.queue_by_kind) {
    if (front == nullptr || positions.begin()->first < front->first) front = &*positions.begin();
  }
  return front == nullptr ? nullptr : &closures_.at(front->second);
}

std::vector<const Closure*> DispatcherState::ClosuresForCoordinator(uint64_t coordinator_id) const {
  std::vector<const Closure*> out;
  auto it = indexes_.closures_by_coordinator.find(coordinator_id);
  if (it == indexes_.closures_by_coordinator.end()) return out;
  for (uint64_t id : SortedIds(it->second)) out.push_back(&closures_.at(id));
  return out;
}

size_t DispatcherState::NumUnfinishedClosures(uint64_t coordinator_id) const {
  auto it = indexes_.unfinished_by_coordinator.find(coordinator_id);
  return it == indexes_.unfinished_by_coordinator.end() ? 0 : it->second;
}

std::vector<const Closure*> DispatcherState::ClosuresOnWorker(uint64_t worker_id) const {
  std::vector<const Closure*> out;
  auto it = indexes_.closures_by_worker.find(worker_id);
  if (it == indexes_.closures_by_worker.end()) return out;
  for (uint64_t id : SortedIds(it->second)) out.push_back(&closures_.at(id));
  return out;
}

const Closure* DispatcherState::FindRunning(uint64_t closure_id, uint64_t worker_id,
                                            uint32_t attempt) const {
  const Closure* closure = FindClosure(closure_id);
  if (closure == nullptr || closure->state != ClosureState::ASSIGNED ||
      closure->worker_id != worker_id || closure->attempts != attempt) {
    return nullptr;
  }
  return closure;
}

std::vector<const Closure*> DispatcherState::UnfinishedClosures(uint64_t coordinator_id) const {
  std::vector<const Closure*> out;
  for (const Closure* closure : ClosuresForCoordinator(coordinator_id)) {
    if (!IsClosureDone(closure->state)) out.push_back(closure);
  }
  return out;
}

const Closure* DispatcherState::FindClosureByRequest(uint64_t coordinator_id,
                                                     uint64_t request_id) const {
  auto it = indexes_.closure_by_request.find(std::make_pair(coordinator_id, request_id));
  return it == indexes_.closure_by_request.end() ? nullptr : FindClosure(it->second);
}

const PerWorkerResource* DispatcherState::FindResourceByRequest(uint64_t coordinator_id,
                                                                uint64_t request_id) const {
  auto it = indexes_.resource_by_request.find(std::make_pair(coordinator_id, request_id));
  return it == indexes_.resource_by_request.end() ? nullptr : FindResource(it->second);
}

int64_t DispatcherState::EarliestClosureDeadline() const {
  return indexes_.closure_deadlines.empty() ? 0 : indexes_.closure_deadlines.begin()->first;
}

std::vector<const Closure*> DispatcherState::ClosuresPastDeadline(int64_t now_micros) const {
  std::vector<const Closure*> out;
  for (const auto& [deadline, id] : indexes_.closure_deadlines) {
    if (deadline > now_micros) break;
    out.push_back(&closures_.at(id));
  }
  return out;
}

const CoordinatorError* DispatcherState::FindCoordinatorError(uint64_t coordinator_id) const {
  auto it = coordinator_errors_.find(coordinator_id);
  return it == coordinator_errors_.end() ? nullptr : &it->second;
}

}  // namespace dispatch::state
