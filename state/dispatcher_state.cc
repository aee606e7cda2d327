// Check and Apply: dispatch on the Update's variant to the per-concern files
// (datasets.cc, workers.cc, jobs.cc, tasks.cc, splits.cc, closures.cc).

#include "state/dispatcher_state.h"

#include <string>

namespace dispatch::state {

namespace {
using journal::Update;
}  // namespace

const char* ProcessingModeName(ProcessingMode mode) {
  switch (mode) {
    case ProcessingMode::OFF:
      return "OFF";
    case ProcessingMode::DYNAMIC:
      return "DYNAMIC";
    case ProcessingMode::FILE:
      return "FILE";
    case ProcessingMode::DATA:
      return "DATA";
    case ProcessingMode::FILE_OR_DATA:
      return "FILE_OR_DATA";
    case ProcessingMode::HINT:
      return "HINT";
  }
  return "UNKNOWN";
}

const char* TargetWorkersName(TargetWorkers target) {
  switch (target) {
    case TargetWorkers::AUTO:
      return "AUTO";
    case TargetWorkers::ANY:
      return "ANY";
    case TargetWorkers::LOCAL:
      return "LOCAL";
  }
  return "UNKNOWN";
}

const char* ClosureStateName(ClosureState state) {
  switch (state) {
    case ClosureState::QUEUED:
      return "queued";
    case ClosureState::ASSIGNED:
      return "assigned";
    case ClosureState::FINISHED:
      return "finished";
    case ClosureState::FAILED:
      return "failed";
    case ClosureState::CANCELLED:
      return "cancelled";
    case ClosureState::WAITING:
      return "waiting";
  }
  return "unknown";
}

Status DispatcherState::Check(Update::Reader u) const {
  switch (u.which()) {
    case Update::INVALID:
      return InvalidArgumentError("update holds no transition");
    case Update::REGISTER_DATASET:
      return CheckRegisterDataset(u.getRegisterDataset());
    case Update::SET_ELEMENT_SPEC:
      return CheckSetElementSpec(u.getSetElementSpec());
    case Update::REGISTER_WORKER:
      return CheckRegisterWorker(u.getRegisterWorker());
    case Update::REMOVE_WORKER:
      return CheckRemoveWorker(u.getRemoveWorker());
    case Update::CREATE_JOB:
      return CheckCreateJob(u.getCreateJob());
    case Update::PRODUCE_SPLIT:
      return CheckProduceSplit(u.getProduceSplit());
    case Update::ACQUIRE_JOB_CLIENT:
      return CheckAcquireJobClient(u.getAcquireJobClient());
    case Update::RELEASE_JOB_CLIENT:
      return CheckReleaseJobClient(u.getReleaseJobClient());
    case Update::GARBAGE_COLLECT_JOB:
      return CheckGarbageCollectJob(u.getGarbageCollectJob());
    case Update::CREATE_TASK:
      return CheckCreateTask(u.getCreateTask());
    case Update::CREATE_PENDING_TASK:
      return CheckCreatePendingTask(u.getCreatePendingTask());
    case Update::CLIENT_HEARTBEAT:
      return CheckClientHeartbeat(u.getClientHeartbeat());
    case Update::REMOVE_TASK:
      return CheckRemoveTask(u.getRemoveTask());
    case Update::FINISH_TASK:
      return CheckFinishTask(u.getFinishTask());
    case Update::RETIRED_CLOSURE_SCHEDULED:
    case Update::RETIRED_CLOSURE_ASSIGNED:
    case Update::RETIRED_CLOSURE_FINISHED:
    case Update::RETIRED_CLOSURE_CANCELLED:
    case Update::RETIRED_CLOSURE_RELEASED:
      return InvalidArgumentError("update holds retired transition " +
                                  std::to_string(static_cast<unsigned>(u.which())) +
                                  " (single closures travel in closure batches)");
    case Update::CLOSURE_FAILED:
      return CheckClosureFailed(u.getClosureFailed());
    case Update::CLOSURE_PUT_BACK:
      return CheckClosurePutBack(u.getClosurePutBack());
    case Update::COORDINATOR_ERROR_CLEARED:
      return CheckCoordinatorErrorCleared(u.getCoordinatorErrorCleared());
    case Update::RESOURCE_CREATED:
      return CheckResourceCreated(u.getResourceCreated());
    case Update::CLOSURE_BATCH:
      return CheckClosureBatch(u.getClosureBatch());
    case Update::HAND_OVER_TASK:
      return CheckHandOverTask(u.getHandOverTask());
  }
  // A variant added by a newer schema: this code cannot apply it faithfully.
  return InvalidArgumentError("update holds unknown transition " +
                              std::to_string(static_cast<unsigned>(u.which())));
}

Status DispatcherState::Apply(Update::Reader u, Effects* effects) {
  if (effects != nullptr) effects->Clear();
  DISPATCH_RETURN_IF_ERROR(Check(u));
  const int64_t now = u.getTimeMicros();
  if (effects != nullptr) effects->time_micros = now;
  // Reset however Apply ends: a state copied later must hold no pointer.
  struct EffectsScope {
    DispatcherState& state;
    ~EffectsScope() {
      state.effects_ = nullptr;
      state.transition_ = Transition();
    }
  } scope{*this};
  effects_ = effects;
  switch (u.which()) {
    case Update::INVALID:
      break;  // rejected by Check
    case Update::REGISTER_DATASET:
      ApplyRegisterDataset(u.getRegisterDataset(), now);
      break;
    case Update::SET_ELEMENT_SPEC:
      ApplySetElementSpec(u.getSetElementSpec());
      break;
    case Update::REGISTER_WORKER:
      ApplyRegisterWorker(u.getRegisterWorker(), now);
      break;
    case Update::REMOVE_WORKER:
      ApplyRemoveWorker(u.getRemoveWorker());
      break;
    case Update::CREATE_JOB:
      ApplyCreateJob(u.getCreateJob(), now);
      break;
    case Update::PRODUCE_SPLIT:
      ApplyProduceSplit(u.getProduceSplit());
      break;
    case Update::ACQUIRE_JOB_CLIENT:
      ApplyAcquireJobClient(u.getAcquireJobClient(), now);
      break;
    case Update::RELEASE_JOB_CLIENT:
      ApplyReleaseJobClient(u.getReleaseJobClient(), now);
      break;
    case Update::GARBAGE_COLLECT_JOB:
      ApplyGarbageCollectJob(u.getGarbageCollectJob());
      break;
    case Update::CREATE_TASK:
      ApplyCreateTask(u.getCreateTask());
      break;
    case Update::CREATE_PENDING_TASK:
      ApplyCreatePendingTask(u.getCreatePendingTask());
      break;
    case Update::CLIENT_HEARTBEAT:
      ApplyClientHeartbeat(u.getClientHeartbeat());
      break;
    case Update::REMOVE_TASK:
      ApplyRemoveTask(u.getRemoveTask());
      break;
    case Update::FINISH_TASK:
      ApplyFinishTask(u.getFinishTask());
      break;
    case Update::RETIRED_CLOSURE_SCHEDULED:
    case Update::RETIRED_CLOSURE_ASSIGNED:
    case Update::RETIRED_CLOSURE_FINISHED:
    case Update::RETIRED_CLOSURE_CANCELLED:
    case Update::RETIRED_CLOSURE_RELEASED:
      break;  // rejected by Check
    case Update::CLOSURE_FAILED:
      ApplyClosureFailed(u.getClosureFailed(), now);
      break;
    case Update::CLOSURE_PUT_BACK:
      ApplyClosurePutBack(u.getClosurePutBack());
      break;
    case Update::COORDINATOR_ERROR_CLEARED:
      ApplyCoordinatorErrorCleared(u.getCoordinatorErrorCleared());
      break;
    case Update::RESOURCE_CREATED:
      ApplyResourceCreated(u.getResourceCreated());
      break;
    case Update::CLOSURE_BATCH:
      ApplyClosureBatch(u.getClosureBatch(), now);
      break;
    case Update::HAND_OVER_TASK:
      ApplyHandOverTask(u.getHandOverTask());
      break;
  }
  last_time_micros_ = now;
  ++num_applied_;
  return Status::Ok();
}

}  // namespace dispatch::state
