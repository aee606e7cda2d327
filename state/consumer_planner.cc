#include "state/consumer_planner.h"

#include <algorithm>

namespace dispatch::state {
namespace {

Status CollectedError(uint64_t job_id) {
  return FailedPreconditionError("job " + std::to_string(job_id) +
                                 " has been garbage-collected after having no client for "
                                 "--job-gc-timeout-ms; consider a higher --job-gc-timeout-ms");
}

// Why `job_client_id` is not in the state, as precisely as the soft state knows.
Status UnknownClientError(const DispatcherState& state, const SoftState& soft,
                          uint64_t job_client_id, const DataPolicy& policy) {
  if (uint64_t released_job = soft.consumers.ReleasedJob(job_client_id)) {
    const Job* job = state.FindJob(released_job);
    if (job != nullptr && job->garbage_collected) return CollectedError(released_job);
    return NotFoundError("job client " + std::to_string(job_client_id) + " of job " +
                         std::to_string(released_job) +
                         " was released (by the client, or after no heartbeat for "
                         "--client-timeout-ms)");
  }
  if (!policy.fault_tolerant_mode) {
    return NotFoundError(
        "job client " + std::to_string(job_client_id) +
        " is unknown; the dispatcher runs without fault-tolerant mode "
        "(--fault-tolerant-mode=false), so a dispatcher restart may have forgotten it");
  }
  return NotFoundError("job client " + std::to_string(job_client_id) +
                       " is unknown (released, timed out, or never created)");
}

}  // namespace

Result<ClientHeartbeatPlan> PlanClientHeartbeat(const DispatcherState& state, const SoftState& soft,
                                                const ClientHeartbeatRequest& request,
                                                uint64_t now_ms, const Stamp& stamp,
                                                const DataPolicy& policy) {
  const uint64_t client_id = request.job_client_id;
  const JobClient* client = state.FindJobClient(client_id);
  if (client == nullptr) return UnknownClientError(state, soft, client_id, policy);
  const Job* job = state.FindJob(client->job_id);
  if (job->garbage_collected) return CollectedError(job->id);

  ClientHeartbeatPlan plan;
  plan.job_id = job->id;
  const int64_t current_round = request.current_round;
  const int64_t blocked_round = request.blocked_round;
  plan.soft.clients_heard.push_back({client_id, current_round, now_ms, stamp.time_micros});
  if (job->pending_tasks.empty()) return plan;

  const PendingTask& front = job->pending_tasks.front();
  const int64_t target = front.target_round;
  // A consumer blocked at or before the target round can still start the
  // task there; one that is past it (or at it without blocking) cannot.
  const bool blocked_in_time =
      (blocked_round >= 0 && blocked_round <= target) ||
      policy.planted_bug == PlantedBug::kRoundRobinIgnoresRounds;  // TEST-ONLY planted bug
  const bool accept = blocked_in_time && !front.ready_clients.contains(client_id);
  const bool reject = !blocked_in_time && current_round >= 0 && current_round >= target;
  if (!accept && !reject) return plan;
  auto heartbeat = plan.updates.Add(stamp.time_micros).initClientHeartbeat();
  heartbeat.setJobClientId(client_id);
  heartbeat.setTaskId(front.task_id);
  if (accept) {
    heartbeat.getOutcome().setAccepted();
  } else {
    // Every rejection pushes the target exponentially further out, past the
    // furthest round the client reported (this heartbeat's included).
    const int64_t offset = int64_t{2} << std::min<int64_t>(front.failures, 40);
    const int64_t round = std::max(soft.consumers.Round(client_id), current_round);
    heartbeat.getOutcome().setRejected(std::max(round, target) + offset);
  }
  return plan;
}

ClientHeartbeatAnswer AnswerClientHeartbeat(const DispatcherState& state, uint64_t job_id) {
  ClientHeartbeatAnswer answer;
  const Job* job = state.FindJob(job_id);
  if (!job->pending_tasks.empty()) answer.block_round = job->pending_tasks.front().target_round;
  answer.tasks = state.TasksForJob(job_id);
  answer.job_finished = job->finished;
  return answer;
}

Result<ReleasePlan> PlanReleaseJobClient(const DispatcherState& state, uint64_t job_client_id,
                                         const Stamp& stamp) {
  ReleasePlan plan;
  if (state.FindJobClient(job_client_id) == nullptr && job_client_id != 0 &&
      job_client_id < state.NextJobClientId()) {
    // Issued and gone (released, or timed out): a retry after a lost reply.
    // Ids are never reused, so this is the same client, and it is released.
    return plan;
  }
  Result<const JobClient*> client = state.GetJobClient(job_client_id);
  if (!client.ok()) return client.status();
  plan.updates.Add(stamp.time_micros).initReleaseJobClient().setJobClientId(job_client_id);
  plan.soft.clients_released.emplace_back(job_client_id, (*client)->job_id);
  return plan;
}

Result<RemoveTaskPlan> PlanMaybeRemoveTask(const DispatcherState& state, const SoftState& soft,
                                           const RemoveTaskRequest& request, const Stamp& stamp) {
  const uint64_t task_id = request.task_id;
  RemoveTaskPlan plan;
  const Task* task = state.FindTask(task_id);
  if (task == nullptr) {
    // Already removed (by this consumer's peers or an earlier retry).
    plan.removed = true;
    return plan;
  }
  const Job* job = state.FindJob(task->job_id);
  if (!job->IsRoundRobin()) {
    return FailedPreconditionError(
        "task " + std::to_string(task_id) + " belongs to job " + std::to_string(job->id) +
        ", which is not round robin; only round-robin tasks are removed");
  }
  if (request.consumer_index >= job->num_consumers) {
    return InvalidArgumentError("consumer index " + std::to_string(request.consumer_index) +
                                " of job " + std::to_string(job->id) + " is out of range: it has " +
                                std::to_string(job->num_consumers) + " consumers");
  }
  if (task->pending) {
    return FailedPreconditionError(
        "task " + std::to_string(task_id) +
        " is pending (not yet accepted by the consumers) and cannot be removed");
  }
  plan.removed =
      soft.consumers.WouldAgree(task_id, request.consumer_index, request.round, job->num_consumers);
  if (!plan.removed) {
    plan.soft.removal_vote =
        SoftChanges::RemovalVote{task_id, request.consumer_index, request.round};
    return plan;
  }
  plan.updates.Add(stamp.time_micros).initRemoveTask().setTaskId(task_id);
  plan.worker_address = task->worker_address;
  plan.soft.removals_forgotten.push_back(task_id);
  return plan;
}

ClientTimeoutPlan PlanClientTimeouts(const DispatcherState& state, const SoftState& soft,
                                     uint64_t now_ms, const Stamp& stamp,
                                     const DataPolicy& policy) {
  ClientTimeoutPlan plan;
  if (policy.client_timeout_ms == 0) return plan;
  for (uint64_t client_id : soft.consumers.TimedOut(now_ms, policy.client_timeout_ms)) {
    const JobClient* client = state.FindJobClient(client_id);
    if (client == nullptr) {
      plan.soft.clients_forgotten.push_back(client_id);
      continue;
    }
    plan.released.push_back(client_id);
    plan.soft.clients_released.emplace_back(client_id, client->job_id);
    plan.updates.Add(stamp.time_micros).initReleaseJobClient().setJobClientId(client_id);
  }
  return plan;
}

}  // namespace dispatch::state
