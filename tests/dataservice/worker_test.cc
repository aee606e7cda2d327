// Workers over RPC: registration by the first heartbeat, tasks for every
// unfinished job, tasks to delete, pushes over the WorkerControl capability
// (and a failed push redone when the worker comes back), workerUpdate,
// liveness (a dropped connection or a missed heartbeat removes the worker
// while everyone else is served; a returning worker re-registers), a new
// worker process at a known address, and the incarnation in every reply.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "tests/dataservice/ds_test_util.h"
#include "tests/support/http_get.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

bool Listed(DsClient& client, const std::string& address) {
  auto workers = client.GetWorkers();
  for (const WorkerView& worker : *workers) {
    if (worker.address == address) return true;
  }
  return false;
}

TEST(Workers, FirstHeartbeatRegistersAndGetsATaskForEveryUnfinishedJob) {
  DispatcherProcess dispatcher({.extra_flags = {"--worker-heartbeat-interval-ms=1234"}});
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  uint64_t dataset = *client.RegisterDataset({.definition = "d"});
  auto a = *client.GetOrCreateJob({.dataset_id = dataset});
  auto b = *client.GetOrCreateJob({.dataset_id = dataset, .num_consumers = 2});
  auto done = *client.GetOrCreateJob({.dataset_id = dataset});
  SimWorker first(loop, dispatcher.address(), "first");
  ASSERT_TRUE(first.Heartbeat().ok());
  ASSERT_TRUE(first.Complete({first.TaskOf(done.job_id)->task_id}).ok());

  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_NE(worker.worker_id(), 0u);
  EXPECT_EQ(worker.last_incarnation(), client.Incarnation());
  EXPECT_EQ(worker.heartbeat_interval_ms(), 1234u);
  ASSERT_TRUE(worker.TaskOf(a.job_id).has_value());
  EXPECT_FALSE(worker.TaskOf(a.job_id)->pending);
  ASSERT_TRUE(worker.TaskOf(b.job_id).has_value());
  EXPECT_TRUE(worker.TaskOf(b.job_id)->pending) << "round-robin jobs get a pending task";
  EXPECT_FALSE(worker.TaskOf(done.job_id).has_value()) << "a finished job gets no task";

  auto workers = *client.GetWorkers();
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_TRUE(workers[1].connected);
  EXPECT_EQ(workers[1].tags, std::vector<std::string>{"sim"});
  EXPECT_EQ(workers[1].num_tasks, 2u);
  // A second heartbeat: nothing new, the same id.
  uint64_t id = worker.worker_id();
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_EQ(worker.worker_id(), id);
}

TEST(Workers, HeartbeatListsTasksTheWorkerShouldDelete) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  auto job = *client.GetOrCreateJob({.dataset_id = *client.RegisterDataset({.definition = "d"})});
  ASSERT_TRUE(worker.Heartbeat().ok());
  uint64_t task = worker.TaskOf(job.job_id)->task_id;
  // Finished behind its back (e.g. reported by an earlier process): withdrawn.
  auto update = worker.dispatcher().workerUpdateRequest();
  update.setWorkerId(worker.worker_id());
  update.initUpdates(1)[0].setTaskId(task);
  update.getUpdates()[0].setCompleted(true);
  loop.Wait(update.send());
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_EQ(worker.last_deleted(), std::vector<uint64_t>{task});
  EXPECT_TRUE(worker.tasks().empty());
}

TEST(Workers, WorkerUpdateFinishesTasksAndNamesUnknownOnes) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  auto job = *client.GetOrCreateJob({.dataset_id = *client.RegisterDataset({.definition = "d"})});
  ASSERT_TRUE(worker.Heartbeat().ok());
  auto unknown = worker.Complete({4242});
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("task 4242"), std::string::npos) << unknown.message();
  ASSERT_TRUE(worker.Complete({worker.TaskOf(job.job_id)->task_id}).ok());
  EXPECT_TRUE(client.ClientHeartbeat(job.job_client_id)->job_finished);
}

TEST(Workers, NewTasksArePushedOverWorkerControlWithoutWaitingForAHeartbeat) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker w1(loop, dispatcher.address(), "w1");
  SimWorker w2(loop, dispatcher.address(), "w2");
  ASSERT_TRUE(w1.Heartbeat().ok());
  ASSERT_TRUE(w2.Heartbeat().ok());
  auto job = *client.GetOrCreateJob({.dataset_id = *client.RegisterDataset({.definition = "d"})});
  for (SimWorker* w : {&w1, &w2}) {
    ASSERT_TRUE(WaitUntil([&] { return !w->pushes().started.empty(); }, loop));
    EXPECT_EQ(w->pushes().started[0].job_id, job.job_id);
    EXPECT_EQ(w->pushes().started[0].worker_address, w->address());
  }
}

// Heartbeat replies are authoritative for tasks; startTasks only makes them
// arrive sooner. A worker that hands over no WorkerControl still gets every
// task, from its heartbeat replies (until it lists the task as current).
TEST(Workers, AWorkerWithoutAWorkerControlGetsItsTasksFromHeartbeatRepliesAlone) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "mute");
  worker.set_send_control(false);
  ASSERT_TRUE(worker.Heartbeat().ok());
  uint64_t dataset = *client.RegisterDataset({.definition = "d"});
  auto first = *client.GetOrCreateJob({.dataset_id = dataset});
  ASSERT_TRUE(worker.Heartbeat().ok());
  ASSERT_TRUE(worker.TaskOf(first.job_id).has_value());
  auto second = *client.GetOrCreateJob({.dataset_id = dataset});
  ASSERT_TRUE(worker.Heartbeat().ok());
  ASSERT_TRUE(worker.TaskOf(second.job_id).has_value());
  EXPECT_EQ(worker.tasks().size(), 2u);
  EXPECT_TRUE(worker.pushes().started.empty());
  auto workers = *client.GetWorkers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].num_tasks, 2u);
}

// The WorkerControl is the one of the worker's current connection: a worker
// that attaches on a new connection without sending one has none, even while
// its old connection (and the capability on it) still works. Before, pushes
// kept going to the old connection's capability.
TEST(Workers, AControlFromAnEarlierConnectionIsNotUsedAfterTheWorkerAttachesAnew) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  worker.Reconnect(dispatcher.address(), /*keep_old=*/true);
  worker.set_send_control(false);
  ASSERT_TRUE(worker.Heartbeat().ok());
  auto job = *client.GetOrCreateJob({.dataset_id = *client.RegisterDataset({.definition = "d"})});
  // A push would have been sent before the job's reply; a round trip on the
  // old connection brings it in.
  ASSERT_TRUE(worker.PingOldConnection().ok());
  EXPECT_TRUE(worker.pushes().started.empty()) << "pushed over the earlier connection";
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_TRUE(worker.TaskOf(job.job_id).has_value()) << "heartbeat replies still list it";
}

TEST(Workers, APushThatFailedIsRedoneWhenTheWorkerComesBack) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  worker.pushes().fail_next_starts = 1;
  auto job = *client.GetOrCreateJob({.dataset_id = *client.RegisterDataset({.definition = "d"})});
  ASSERT_TRUE(WaitUntil([&] { return worker.pushes().failed_starts == 1; }, loop));
  EXPECT_TRUE(worker.pushes().started.empty());
  // It comes back over a new connection (the old one not yet noticed dead).
  worker.Reconnect(dispatcher.address(), /*keep_old=*/true);
  ASSERT_TRUE(worker.Heartbeat().ok());
  ASSERT_TRUE(WaitUntil([&] { return !worker.pushes().started.empty(); }, loop));
  EXPECT_EQ(worker.pushes().started[0].job_id, job.job_id);
}

TEST(Workers, PushesAWorkerLeavesUnansweredAreLimitedAndTheRestWaitForItsReturn) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker worker(loop, dispatcher.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  worker.pushes().hold_starts = true;
  uint64_t dataset = *client.RegisterDataset({.definition = "d"});
  constexpr int kJobs = 70;  // the limit is 64 unanswered pushes per worker
  for (int i = 0; i < kJobs; ++i) ASSERT_TRUE(client.GetOrCreateJob({.dataset_id = dataset}).ok());
  // Every push was issued before the replies above; this round trip on the
  // worker's own connection delivers those that were sent.
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_EQ(worker.pushes().held_starts, 64);
  EXPECT_EQ(worker.tasks().size(), static_cast<size_t>(kJobs))
      << "heartbeats still list every task";
  // Back over a new connection: the deferred pushes go out.
  worker.pushes().hold_starts = false;
  worker.Reconnect(dispatcher.address(), /*keep_old=*/true);
  ASSERT_TRUE(worker.Heartbeat().ok());
  ASSERT_TRUE(
      WaitUntil([&] { return worker.pushes().started.size() == static_cast<size_t>(kJobs); }, loop,
                std::chrono::seconds(5)))
      << worker.pushes().started.size() << " started, " << worker.pushes().held_starts << " held";
}

// A dispatcher started with `flags`, workers "gone" and "stays" registered,
// and an OFF job with a task on each.
struct GoneAndStays {
  explicit GoneAndStays(std::vector<std::string> flags)
      : dispatcher({.extra_flags = std::move(flags)}),
        client(loop, dispatcher.address()),
        gone(loop, dispatcher.address(), "gone"),
        stays(loop, dispatcher.address(), "stays") {
    EXPECT_TRUE(gone.Heartbeat().ok());
    EXPECT_TRUE(stays.Heartbeat().ok());
    job = *client.GetOrCreateJob({.dataset_id = *client.RegisterDataset({.definition = "d"})});
  }
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client;
  SimWorker gone;
  SimWorker stays;
  JobIds job;
};

TEST(Workers, ADroppedConnectionRemovesTheWorkerWhileOthersAreServed) {
  GoneAndStays world({"--worker-timeout-ms=600000"});
  ClientLoop& loop = world.loop;
  DsClient& client = world.client;
  SimWorker& gone = world.gone;
  SimWorker& stays = world.stays;
  const JobIds job = world.job;
  gone.Disconnect();
  ASSERT_TRUE(WaitUntil(
      [&] {
        EXPECT_TRUE(stays.Heartbeat().ok());
        EXPECT_TRUE(client.ClientHeartbeat(job.job_client_id).ok());
        return !Listed(client, "gone");
      },
      loop));
  EXPECT_TRUE(Listed(client, "stays"));
  // Its task waits for it (within the grace period, 10 s here): it comes
  // back, re-registers under a new id and gets the task again.
  gone.Reconnect(world.dispatcher.address());
  ASSERT_TRUE(gone.Heartbeat().ok());
  EXPECT_TRUE(Listed(client, "gone"));
  EXPECT_TRUE(gone.TaskOf(job.job_id).has_value());
}

TEST(Workers, ATaskWhoseWorkerIsGonePastTheGracePeriodIsHandedOverAndListedFinished) {
  GoneAndStays world({"--worker-timeout-ms=600000", "--worker-grace-ms=200"});
  ClientLoop& loop = world.loop;
  DsClient& client = world.client;
  SimWorker& gone = world.gone;
  SimWorker& stays = world.stays;
  const JobIds job = world.job;
  ASSERT_TRUE(gone.Heartbeat().ok());  // learns its task
  ASSERT_TRUE(gone.TaskOf(job.job_id).has_value());
  const uint64_t task = gone.TaskOf(job.job_id)->task_id;
  gone.Disconnect();
  // Its address never sees a worker again: past the grace its task is
  // finished for it, and consumers see so in their task list.
  bool finished = false;
  ASSERT_TRUE(WaitUntil(
      [&] {
        EXPECT_TRUE(stays.Heartbeat().ok());
        Result<ClientHeartbeatView> beat = client.ClientHeartbeat(job.job_client_id);
        if (!beat.ok()) return false;
        for (const TaskView& t : beat->tasks)
          if (t.task_id == task) finished = t.finished;
        return finished;
      },
      loop))
      << "task " << task << " was never handed over";
  EXPECT_EQ(MetricSample(HttpGet(world.dispatcher.http_url(), "/metrics").body,
                         "dispatch_tasks_handed_over_total"),
            1.0);
  // The job goes on with the worker that stays, and ends with its task.
  Result<ClientHeartbeatView> beat = client.ClientHeartbeat(job.job_client_id);
  ASSERT_TRUE(beat.ok());
  EXPECT_FALSE(beat->job_finished);
  ASSERT_TRUE(stays.TaskOf(job.job_id).has_value());
  ASSERT_TRUE(stays.Complete({stays.TaskOf(job.job_id)->task_id}).ok());
  beat = client.ClientHeartbeat(job.job_client_id);
  ASSERT_TRUE(beat.ok());
  EXPECT_TRUE(beat->job_finished);
}

// Before, the interval stayed 10 s whatever the timeout: with
// --worker-timeout-ms=2000 a worker beating as told was removed as silent.
TEST(Workers, WorkersAreToldToHeartbeatWellWithinTheWorkerTimeout) {
  for (uint64_t timeout_ms : {2000u, 60000u}) {
    DispatcherProcess dispatcher(
        {.extra_flags = {"--worker-timeout-ms=" + std::to_string(timeout_ms)}});
    ClientLoop loop;
    SimWorker worker(loop, dispatcher.address(), "w");
    ASSERT_TRUE(worker.Heartbeat().ok());
    EXPECT_GT(worker.heartbeat_interval_ms(), 0u);
    EXPECT_LE(worker.heartbeat_interval_ms(), timeout_ms / 4) << "timeout " << timeout_ms;
    EXPECT_LE(worker.heartbeat_interval_ms(), 10000u) << "timeout " << timeout_ms;
  }
}

TEST(Workers, AHeartbeatIntervalOverHalfTheWorkerTimeoutIsRefusedAtStart) {
  TempDir dir;
  const std::string log = dir.File("stderr");
  Subprocess refused({DispatcherBinary(), "--listen=tcp:127.0.0.1:0", "--http=tcp:127.0.0.1:0",
                      "--worker-timeout-ms=2000",
                      "--worker-heartbeat-interval-ms=1500"},
                     log);
  auto status = refused.Wait(std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2);
  std::ifstream in(log);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(said.find("--worker-heartbeat-interval-ms=1500"), std::string::npos) << said;
  EXPECT_NE(said.find("--worker-timeout-ms=2000"), std::string::npos) << said;
  // Half the timeout is still accepted.
  DispatcherProcess accepted({.extra_flags = {"--worker-timeout-ms=2000",
                                              "--worker-heartbeat-interval-ms=1000"}});
  ClientLoop loop;
  SimWorker worker(loop, accepted.address(), "w");
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_EQ(worker.heartbeat_interval_ms(), 1000u);
}

TEST(Workers, AWorkerThatStopsHeartbeatingIsRemovedWithinTheTimeout) {
  // `alive` must outlive the timeout while the test heartbeats it: with two
  // suites on two cores a process can stall for over a second.
  DispatcherProcess dispatcher({.extra_flags = {"--worker-timeout-ms=3000"}});
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker silent(loop, dispatcher.address(), "silent");
  SimWorker alive(loop, dispatcher.address(), "alive");
  ASSERT_TRUE(silent.Heartbeat().ok());
  ASSERT_TRUE(alive.Heartbeat().ok());
  uint64_t first_id = silent.worker_id();
  // `silent` keeps its connection open but says nothing.
  ASSERT_TRUE(WaitUntil(
      [&] {
        EXPECT_TRUE(alive.Heartbeat().ok());
        return !Listed(client, "silent");
      },
      loop));
  EXPECT_TRUE(Listed(client, "alive"));
  ASSERT_TRUE(silent.Heartbeat().ok());
  EXPECT_NE(silent.worker_id(), first_id) << "a returning worker registers again";
  EXPECT_TRUE(Listed(client, "silent"));
}

TEST(Workers, ANewProcessAtAKnownAddressReplacesTheOldRegistration) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  SimWorker old_process(loop, dispatcher.address(), "w", /*incarnation=*/11);
  ASSERT_TRUE(old_process.Heartbeat().ok());
  auto job = *client.GetOrCreateJob({.dataset_id = *client.RegisterDataset({.definition = "d"})});
  SimWorker new_process(loop, dispatcher.address(), "w", /*incarnation=*/12);
  ASSERT_TRUE(new_process.Heartbeat().ok());
  EXPECT_NE(new_process.worker_id(), old_process.worker_id());
  EXPECT_TRUE(new_process.TaskOf(job.job_id).has_value());
  EXPECT_EQ(client.GetWorkers()->size(), 1u);
}

TEST(Workers, AfterARestartWorkersSeeTheNewIncarnationAndKeepTheirTasks) {
  TempDir dir;
  uint64_t job_id;
  uint64_t worker_id;
  uint64_t incarnation;
  std::map<uint64_t, TaskView> tasks;
  {
    DispatcherProcess dispatcher({.work_dir = dir.File("work")});
    ClientLoop loop;
    DsClient client(loop, dispatcher.address());
    SimWorker worker(loop, dispatcher.address(), "w", 5);
    ASSERT_TRUE(worker.Heartbeat().ok());
    job_id =
        client.GetOrCreateJob({.dataset_id = *client.RegisterDataset({.definition = "d"})})->job_id;
    ASSERT_TRUE(worker.Heartbeat().ok());
    worker_id = worker.worker_id();
    incarnation = worker.last_incarnation();
    tasks = worker.tasks();
    dispatcher.process().Signal(SIGKILL);
    dispatcher.process().Wait(std::chrono::seconds(10));
  }
  DispatcherProcess dispatcher({.work_dir = dir.File("work")});
  ClientLoop loop;
  SimWorker worker(loop, dispatcher.address(), "w", 5);
  ASSERT_TRUE(worker.Heartbeat().ok());
  EXPECT_NE(worker.last_incarnation(), incarnation);
  EXPECT_EQ(worker.worker_id(), worker_id);
  ASSERT_TRUE(worker.TaskOf(job_id).has_value());
  EXPECT_EQ(worker.TaskOf(job_id)->task_id, tasks.begin()->first);
}

TEST(Workers, WithoutFaultTolerantModeARestartedDispatcherTellsWorkersToDropEverything) {
  TempDir dir;
  const std::vector<std::string> flags = {"--fault-tolerant-mode=false"};
  {
    DispatcherProcess dispatcher({.work_dir = dir.File("work"), .extra_flags = flags});
    ClientLoop loop;
    DsClient client(loop, dispatcher.address());
    SimWorker worker(loop, dispatcher.address(), "w", 5);
    ASSERT_TRUE(worker.Heartbeat().ok());
    ASSERT_TRUE(
        client.GetOrCreateJob({.dataset_id = *client.RegisterDataset({.definition = "d"})}).ok());
    ASSERT_TRUE(worker.Heartbeat().ok());
    ASSERT_EQ(worker.tasks().size(), 1u);
    dispatcher.process().Signal(SIGKILL);
    dispatcher.process().Wait(std::chrono::seconds(10));
  }
  DispatcherProcess dispatcher({.work_dir = dir.File("work"), .extra_flags = flags});
  ClientLoop loop;
  SimWorker worker(loop, dispatcher.address(), "w", 5);
  // The same process comes back with the task it was running.
  auto stale = loop.Wait([&] {
    auto request = worker.dispatcher().workerHeartbeatRequest();
    request.initRequest().setAddress("w");
    request.getRequest().setWorkerIncarnation(5);
    request.getRequest().initCurrentTasks(1).set(0, 1);
    return request.send();
  }());
  EXPECT_EQ(stale.getResponse().getTasksToDelete().size(), 1u);
  EXPECT_EQ(stale.getResponse().getNewTasks().size(), 0u);
  EXPECT_NE(stale.getResponse().getWorkerId(), 0u);
}

TEST(Workers, BadHeartbeatsGetClearErrors) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-name-bytes=64"}});
  ClientLoop loop;
  SimWorker nameless(loop, dispatcher.address(), "");
  EXPECT_EQ(nameless.Heartbeat().code(), StatusCode::kInvalidArgument);
  SimWorker long_name(loop, dispatcher.address(), std::string(100, 'x'));
  auto status = long_name.Heartbeat();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("worker address"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace dispatch::testing
