// DispatcherService: jobs and their consumers, decided by the planners in
// state/job_planner.h (getOrCreateJob: create or join, a task on every worker
// that can produce the dataset, a job client per caller) and
// state/consumer_planner.h (clientHeartbeat's round-robin agreement on
// pending tasks, releaseJobClient, maybeRemoveTask's agreement of every
// consumer at one round). Here requests are decoded, plans carried (their
// Updates, then their soft changes and task pushes) and answers encoded;
// clientHeartbeat answers the job's task list only when it changed since the
// version the client holds.

#include <string>

#include "reactor/data_service.h"
#include "reactor/service_util.h"
#include "reactor/services.h"
#include "reactor/task_info.h"
#include "state/consumer_planner.h"
#include "state/job_planner.h"

namespace dispatch::reactor {

namespace {

// Carries a plan's Updates, then its soft changes.
template <typename Plan>
void CarryPlan(DataService& data, const Plan& plan) {
  ThrowIfError(data.Carry(plan.updates));
  data.mutable_soft().Apply(plan.soft);
}

}  // namespace

kj::Promise<void> DispatcherService::getOrCreateJob(GetOrCreateJobContext context) {
  DataService& data = this->data();
  auto request = context.getParams().getRequest();
  const state::JobRequest decoded{request.getDatasetId(),
                                  std::string(View(request.getJobName())),
                                  request.getJobNameIndex(),
                                  request.getProcessingMode(),
                                  request.getTargetWorkers(),
                                  request.getNumConsumers(),
                                  request.getRequeueUnfinishedSplits()};
  state::JobPlan plan = ValueOrThrow(state::PlanGetOrCreateJob(
      data.state(), decoded, data.split_sources(), data.NowMs(), data.Stamp(), data.policy()));
  CarryPlan(data, plan);
  // Connected workers are told of the new tasks once the pass commits.
  for (auto& [address, ids] : plan.tasks_to_push) data.workers().PushStartTasks(address, ids);
  auto results = context.getResults();
  results.setIncarnation(data.incarnation());
  results.setJobId(plan.job_id);
  results.setJobClientId(plan.job_client_id);
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::clientHeartbeat(ClientHeartbeatContext context) {
  DataService& data = this->data();
  const auto& state = data.state();
  auto request = context.getParams().getRequest();
  const state::ClientHeartbeatRequest decoded{request.getJobClientId(), request.getCurrentRound(),
                                              request.getBlockedRound()};
  state::ClientHeartbeatPlan plan = ValueOrThrow(state::PlanClientHeartbeat(
      state, data.soft(), decoded, data.NowMs(), data.Stamp(), data.policy()));
  CarryPlan(data, plan);

  const state::ClientHeartbeatAnswer answer = state::AnswerClientHeartbeat(state, plan.job_id);
  auto results = context.getResults();
  auto response = results.initResponse();
  response.setBlockRound(answer.block_round);
  const uint64_t version = TaskListVersion(answer.tasks);
  response.setTaskListVersion(version);
  if (request.getKnownTaskListVersion() == version) {
    response.setTaskListChanged(false);
  } else {
    response.setTaskListChanged(true);
    auto list = response.initTasks(static_cast<unsigned>(answer.tasks.size()));
    for (size_t i = 0; i < answer.tasks.size(); ++i)
      FillTaskInfo(state, data.options(), *answer.tasks[i], list[i]);
  }
  response.setJobFinished(answer.job_finished);
  response.setIncarnation(data.incarnation());
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::releaseJobClient(ReleaseJobClientContext context) {
  DataService& data = this->data();
  context.getResults().setIncarnation(data.incarnation());
  state::ReleasePlan plan = ValueOrThrow(state::PlanReleaseJobClient(
      data.state(), context.getParams().getJobClientId(), data.Stamp()));
  CarryPlan(data, plan);
  return data.durable().pipeline().Barrier();
}

kj::Promise<void> DispatcherService::maybeRemoveTask(MaybeRemoveTaskContext context) {
  DataService& data = this->data();
  auto params = context.getParams();
  auto results = context.getResults();
  results.setIncarnation(data.incarnation());
  const state::RemoveTaskRequest decoded{params.getTaskId(), params.getConsumerIndex(),
                                         params.getRound()};
  state::RemoveTaskPlan plan =
      ValueOrThrow(state::PlanMaybeRemoveTask(data.state(), data.soft(), decoded, data.Stamp()));
  CarryPlan(data, plan);
  if (!plan.updates.empty()) data.workers().PushDeleteTasks(plan.worker_address, {decoded.task_id});
  results.setRemoved(plan.removed);
  return data.durable().pipeline().Barrier();
}

}  // namespace dispatch::reactor
