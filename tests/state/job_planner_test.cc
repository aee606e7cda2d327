// The jobs' decisions (state/job_planner.h): creating a job with a task on
// every worker that can produce its dataset and a client for its caller,
// joining a named one, the refusals (with the texts clients and PROTOCOL.md
// rely on), and job GC. Every plan is applied to prove its Updates valid.

#include "state/job_planner.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "state/dispatcher_state.h"
#include "tests/state/planner_test_support.h"
#include "tests/state/state_matchers.h"
#include "tests/state/update_builders.h"

namespace dispatch::state {
namespace {

using namespace ::dispatch::state::testing;  // NOLINT: builders read like a table

SplitSourceLookup Sources(bool present = true) {
  return [present](uint64_t) -> Result<SplitSourceSummary> {
    return SplitSourceSummary{present, 10};
  };
}

// Dataset 1 of kind "range"; workers "a" (range), "b" (python), "c" (no kinds).
DispatcherState Cluster() {
  DispatcherState state;
  ApplyEach(state, RegisterDataset(1, 100, "", "", "range"),
            RegisterWorker(1, "a", "", {}, 1, {"range"}),
            RegisterWorker(2, "b", "", {}, 1, {"python"}), RegisterWorker(3, "c"));
  return state;
}

JobRequest Request(std::string name = "", ProcessingMode mode = ProcessingMode::OFF) {
  JobRequest request;
  request.dataset_id = 1;
  request.job_name = std::move(name);
  request.processing_mode = mode;
  return request;
}

Result<JobPlan> Plan(const DispatcherState& state, const JobRequest& request,
                     const DataPolicy& policy = {}, const SplitSourceLookup& sources = Sources()) {
  return PlanGetOrCreateJob(state, request, sources, 50, kStamp, policy);
}

JobPlan Carry(DispatcherState& state, SoftState& soft, const JobRequest& request) {
  Result<JobPlan> plan = Plan(state, request);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  EXPECT_TRUE(AppliesAll(state, plan->updates));
  soft.Apply(plan->soft);
  return std::move(*plan);
}

TEST(JobPlanner, AnAnonymousRequestCreatesAJobWithTasksOnWorkersThatCanProduceItAndAClient) {
  DispatcherState state = Cluster();
  SoftState soft;
  const JobPlan plan = Carry(state, soft, Request());
  EXPECT_TRUE(plan.created);
  EXPECT_EQ(plan.job_id, 1u);
  EXPECT_EQ(plan.job_client_id, 1u);
  EXPECT_EQ(plan.tasks_to_push, (TasksByAddress{{"a", {1}}, {"c", {2}}}));
  EXPECT_EQ(state.FindJob(1)->num_clients, 1);
  EXPECT_EQ(state.FindTaskForJobAndWorker(1, "b"), nullptr);
  EXPECT_EQ(soft.consumers.LastHeartbeatMicros(1), kStamp.time_micros);
  EXPECT_EQ(soft.consumers.Round(1), -1);
  // Another anonymous request: another job.
  EXPECT_EQ(Carry(state, soft, Request()).job_id, 2u);
}

TEST(JobPlanner, ANamedJobIsJoinedWithAClientOfItsOwnAndNoNewTasks) {
  DispatcherState state = Cluster();
  SoftState soft;
  Carry(state, soft, Request("train"));
  const uint64_t tasks = state.NumTasks();
  const JobPlan joined = Carry(state, soft, Request("train"));
  EXPECT_FALSE(joined.created);
  EXPECT_EQ(joined.job_id, 1u);
  EXPECT_EQ(joined.job_client_id, 2u);
  EXPECT_TRUE(joined.tasks_to_push.empty());
  EXPECT_EQ(state.NumTasks(), tasks);
  EXPECT_EQ(state.FindJob(1)->num_clients, 2);
  // Another index of the name is another job.
  JobRequest other = Request("train");
  other.job_name_index = 1;
  EXPECT_EQ(Carry(state, soft, other).job_id, 2u);
}

TEST(JobPlanner, AGarbageCollectedNamedJobGivesItsNameToANewJob) {
  DispatcherState state = Cluster();
  SoftState soft;
  Carry(state, soft, Request("train"));
  ApplyEach(state, ReleaseJobClient(1), GarbageCollectJob(1));
  const JobPlan plan = Carry(state, soft, Request("train"));
  EXPECT_TRUE(plan.created);
  EXPECT_EQ(plan.job_id, 2u);
}

TEST(JobPlanner, ReusingANamedJobWithOtherSettingsNamesBoth) {
  DispatcherState state = Cluster();
  SoftState soft;
  Carry(state, soft, Request("train"));
  const Status mode = Plan(state, Request("train", ProcessingMode::DYNAMIC)).status();
  EXPECT_EQ(mode.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(mode.message(),
            "job name 'train' index 0 is held by job 1 with processing mode OFF; this request "
            "asks for processing mode DYNAMIC");
  JobRequest consumers = Request("train");
  consumers.num_consumers = 2;
  EXPECT_EQ(Plan(state, consumers).status().message(),
            "job name 'train' index 0 is held by job 1 with 0 round-robin consumers; this "
            "request asks for 2");
  JobRequest target = Request("train");
  target.target_workers = TargetWorkers::LOCAL;
  EXPECT_EQ(Plan(state, target).status().message(),
            "job name 'train' index 0 is held by job 1 with target workers AUTO; this request "
            "asks for target workers LOCAL");
  ASSERT_TRUE(Applies(state, RegisterDataset(2, 200)));
  JobRequest dataset = Request("train");
  dataset.dataset_id = 2;
  EXPECT_EQ(Plan(state, dataset).status().message(),
            "job name 'train' index 0 is held by job 1 of dataset 1; this request names dataset 2");
}

TEST(JobPlanner, BadRequestsAreRefusedInTheOrderTheReactorChecksThem) {
  DispatcherState state = Cluster();
  JobRequest unknown = Request(std::string(5000, 'n'));
  unknown.dataset_id = 9;
  EXPECT_EQ(Plan(state, unknown).status().code(), StatusCode::kNotFound);  // before the name
  EXPECT_EQ(Plan(state, Request(std::string(5000, 'n'))).status().message(),
            "job name of 5000 bytes is longer than the limit of 4096");
  EXPECT_EQ(Plan(state, Request("", static_cast<ProcessingMode>(77))).status().message(),
            "processing mode 77 is unknown");
  JobRequest target = Request();
  target.target_workers = static_cast<TargetWorkers>(9);
  EXPECT_EQ(Plan(state, target).status().message(), "target workers 9 is unknown");
  const Status sharded = Plan(state, Request("", ProcessingMode::DATA)).status();
  EXPECT_EQ(sharded.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sharded.message(),
            "processing mode DATA shards by worker index and needs a fixed worker list, but "
            "none is configured: start the dispatcher with --worker-addresses");
  DataPolicy listed;
  listed.has_worker_list = true;
  EXPECT_TRUE(Plan(state, Request("", ProcessingMode::DATA), listed).ok());
  JobRequest requeue = Request();
  requeue.requeue_unfinished_splits = true;
  EXPECT_EQ(Plan(state, requeue).status().message(),
            "requeueUnfinishedSplits needs processing mode DYNAMIC, not OFF");
  const Status no_source =
      Plan(state, Request("", ProcessingMode::DYNAMIC), {}, Sources(false)).status();
  EXPECT_EQ(no_source.message(),
            "dataset 1 has no split source; a DYNAMIC job hands out splits and needs one");
  const SplitSourceLookup damaged = [](uint64_t) -> Result<SplitSourceSummary> {
    return DataLossError("dataset 1: damaged");
  };
  EXPECT_EQ(Plan(state, Request("", ProcessingMode::DYNAMIC), {}, damaged).status().code(),
            StatusCode::kDataLoss);
  Result<JobPlan> dynamic = Plan(state, Request("", ProcessingMode::DYNAMIC));
  ASSERT_TRUE(dynamic.ok());
  EXPECT_TRUE(AppliesAll(state, dynamic->updates));
  EXPECT_NE(state.FindSplitProvider(dynamic->job_id, 0), nullptr);
}

TEST(JobPlanner, JobGcCollectsJobsWhoseLastClientLeftLongEnoughAgo) {
  DispatcherState state = Cluster();
  SoftState soft;
  Carry(state, soft, Request());  // job 1: tasks 1 (a), 2 (c); client 1
  Carry(state, soft, Request());  // job 2: tasks 3 (a), 4 (c); client 2
  Carry(state, soft, Request());  // job 3: client 3, kept
  ApplyEach(state, ReleaseJobClient(1).At(1000), ReleaseJobClient(2).At(5000));
  soft.consumers.Vote(1, 0, 3);
  DataPolicy policy;
  policy.job_gc_timeout_ms = 3;  // 3000 micros
  EXPECT_TRUE(PlanJobGc(state, Stamp{3999, kStamp.max_record_bytes}, policy).jobs.empty());
  JobGcPlan plan = PlanJobGc(state, Stamp{4000, kStamp.max_record_bytes}, policy);
  ASSERT_EQ(plan.jobs.size(), 1u);
  EXPECT_EQ(plan.jobs[0].job_id, 1u);
  EXPECT_EQ(plan.jobs[0].tasks, (TasksByAddress{{"a", {1}}, {"c", {2}}}));
  EXPECT_EQ(plan.soft.removals_forgotten, (IdList{1, 2}));
  plan = PlanJobGc(state, Stamp{8000, kStamp.max_record_bytes}, policy);
  ASSERT_EQ(plan.jobs.size(), 2u);
  ASSERT_TRUE(AppliesAll(state, plan.updates));
  EXPECT_TRUE(state.FindJob(1)->garbage_collected);
  EXPECT_TRUE(state.FindJob(2)->garbage_collected);
  EXPECT_FALSE(state.FindJob(3)->finished);
  EXPECT_TRUE(PlanJobGc(state, Stamp{9000, kStamp.max_record_bytes}, policy).jobs.empty());
}

TEST(JobPlanner, TasksByWorkerIncludesPendingTasks) {
  DispatcherState state = Cluster();
  JobOptions round_robin;
  round_robin.num_consumers = 1;
  ApplyEach(state, CreateJob(1, 1, round_robin), CreateTask(1, 1, "a"),
            CreatePendingTask(2, 1, "c", 4));
  EXPECT_EQ(TasksByWorker(state, 1), (TasksByAddress{{"a", {1}}, {"c", {2}}}));
}

}  // namespace
}  // namespace dispatch::state
