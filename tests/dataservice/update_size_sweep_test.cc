// Issue 12, section 1: no request stops the dispatcher. Every method that
// journals is driven with its largest accepted inputs, from clients and from
// workers, against the real dispatcher; each either works or gets a clear
// error naming the limit, and the dispatcher keeps serving afterwards (it is
// still running, answers a ping, and changed nothing for a refused call).
// Before the byte budget in DurableState::Submit several of these made the
// dispatcher exit 3 ("journal record ... fail-stop"); the table says which.
#include <gtest/gtest.h>
#include <signal.h>

#include <cctype>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/dataservice/ds_test_util.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

constexpr size_t kMiB = size_t{1} << 20;
// The journal's per-record limit (StoreOptions.max_record_bytes).
constexpr size_t kRecordLimit = 16 * kMiB;

capnp::Data::Reader Bytes(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

// What a case expects of its call.
struct Expect {
  bool works = true;
  StatusCode code = StatusCode::kOk;
  std::string text;  // in the error message
};
Expect Works() { return Expect{}; }
Expect Refused(StatusCode code, std::string text) { return Expect{false, code, std::move(text)}; }

// One connection per role; fresh dispatcher per case.
struct Peers {
  ClientLoop& loop;
  DispatcherProcess& dispatcher;
  DsClient client;
  Peers(ClientLoop& l, DispatcherProcess& d) : loop(l), dispatcher(d), client(l, d.address()) {}

  // A coordinator session with `id`.
  rpc::Coordinator::Client Coordinator(uint64_t id = 7) {
    auto request = client.dispatcher().openCoordinatorRequest();
    request.setCoordinatorId(id);
    return request.send().getCoordinator();
  }
  Result<uint64_t> Queued() {
    return Try(loop, client.dispatcher().getClosureStatsRequest().send().then(
                         [](auto r) { return r.getStats().getQueued(); }));
  }
  // schedule with closures of these arg sizes; returns how many ids came back.
  Result<size_t> Schedule(const std::vector<size_t>& arg_sizes) {
    auto request = Coordinator().scheduleRequest();
    auto list = request.initClosures(static_cast<unsigned>(arg_sizes.size()));
    for (size_t i = 0; i < arg_sizes.size(); ++i) {
      list[i].setFunction("echo");
      std::string args(arg_sizes[i], static_cast<char>('a' + i % 26));
      list[i].setArgs(Bytes(args));
      list[i].setRequestId(1000 + i);
    }
    return Try(loop, request.send().then([](auto r) { return size_t{r.getClosureIds().size()}; }));
  }
  // A raw worker heartbeat.
  Result<uint64_t> Heartbeat(const std::string& address, size_t tags, size_t tag_bytes,
                             size_t current_tasks = 0) {
    auto request = client.dispatcher().workerHeartbeatRequest();
    auto r = request.initRequest();
    r.setAddress(address);
    r.setTransferAddress("tcp:127.0.0.1:1");
    r.setWorkerIncarnation(5);
    auto list = r.initTags(static_cast<unsigned>(tags));
    std::string tag(tag_bytes, 't');
    for (size_t i = 0; i < tags; ++i) list.set(i, tag);
    auto current = r.initCurrentTasks(static_cast<unsigned>(current_tasks));
    for (size_t i = 0; i < current_tasks; ++i) current.set(i, i + 1);
    return Try(loop, request.send().then([](auto r) { return r.getResponse().getWorkerId(); }));
  }
};

struct SweepCase {
  const char* name;
  const char* before;  // what today's main did (for the report)
  std::vector<std::string> flags;
  std::function<Status(Peers&)> call;
  Expect expect;
  // After the call: what must hold (refused: nothing changed; works: it took).
  std::function<void(Peers&)> after = [](Peers&) {};
};

Status StatusOf(const Result<size_t>& r) { return r.status(); }

std::vector<SweepCase> Cases() {
  std::vector<SweepCase> cases;
  // ---- Clients: closures --------------------------------------------------
  cases.push_back({"schedule of 20 closures of 1 MiB each",
                   "exit 3",
                   {},
                   [](Peers& p) {
                     auto n = p.Schedule(std::vector<size_t>(20, kMiB));
                     if (n.ok() && *n != 20) return InternalError("ids: " + std::to_string(*n));
                     return n.status();
                   },
                   Works(),
                   [](Peers& p) { EXPECT_EQ(*p.Queued(), 20u); }});
  cases.push_back({"schedule of 60 closures of 1 MiB each",
                   "exit 3",
                   {},
                   [](Peers& p) { return StatusOf(p.Schedule(std::vector<size_t>(60, kMiB))); },
                   Works(),
                   [](Peers& p) { EXPECT_EQ(*p.Queued(), 60u); }});
  cases.push_back({"schedule of one closure whose args exceed a record",
                   "exit 3",
                   {},
                   [](Peers& p) { return StatusOf(p.Schedule({kRecordLimit})); },
                   Refused(StatusCode::kResourceExhausted, "16777216"),
                   [](Peers& p) { EXPECT_EQ(*p.Queued(), 0u); }});
  cases.push_back({"schedule with one oversized closure among small ones",
                   "exit 3",
                   {},
                   [](Peers& p) {
                     return StatusOf(p.Schedule({10, kRecordLimit + 5, 10}));
                   },
                   Refused(StatusCode::kResourceExhausted, "closure 1 of the batch"),
                   [](Peers& p) { EXPECT_EQ(*p.Queued(), 0u); }});
  cases.push_back({"per-worker resource with args over a record",
                   "exit 3",
                   {},
                   [](Peers& p) {
                     auto request = p.Coordinator().createPerWorkerResourceRequest();
                     request.setFunction("make_resource");
                     request.setArgs(Bytes(std::string(kRecordLimit, 'r')));
                     request.setRequestId(3);
                     return Try(p.loop, request.send().then([](auto) { return 0; })).status();
                   },
                   Refused(StatusCode::kResourceExhausted, "16777216")});
  cases.push_back({"per-worker resource with 15 MiB of args",
                   "works",
                   {},
                   [](Peers& p) {
                     auto request = p.Coordinator().createPerWorkerResourceRequest();
                     request.setFunction("make_resource");
                     request.setArgs(Bytes(std::string(15 * kMiB, 'r')));
                     request.setRequestId(3);
                     return Try(p.loop, request.send().then([](auto) { return 0; })).status();
                   },
                   Works()});
  // ---- Clients: datasets and jobs -----------------------------------------
  cases.push_back({"dataset with an element spec over a record",
                   "exit 3",
                   {},
                   [](Peers& p) {
                     return p.client
                         .RegisterDataset(
                             {.definition = "d", .element_spec = std::string(kRecordLimit, 'e')})
                         .status();
                   },
                   Refused(StatusCode::kResourceExhausted, "element spec"),
                   [](Peers& p) { EXPECT_TRUE(p.client.ListDatasets()->empty()); }});
  cases.push_back({"dataset with 15 MiB element spec",
                   "works",
                   {},
                   [](Peers& p) {
                     auto id = p.client.RegisterDataset(
                         {.definition = "d", .element_spec = std::string(15 * kMiB, 'e')});
                     if (!id.ok()) return id.status();
                     auto spec = p.client.GetElementSpec(*id);
                     if (!spec.ok()) return spec.status();
                     return spec->size() == 15 * kMiB ? Status::Ok() : InternalError("spec size");
                   },
                   Works()});
  cases.push_back({"dataset with metadata over a record",
                   "error",
                   {},
                   [](Peers& p) {
                     return p.client
                         .RegisterDataset(
                             {.definition = "d", .metadata = std::string(kRecordLimit, 'm')})
                         .status();
                   },
                   Refused(StatusCode::kResourceExhausted, "journal record"),
                   [](Peers& p) { EXPECT_TRUE(p.client.ListDatasets()->empty()); }});
  cases.push_back({"dataset definition of 60 MiB",
                   "works",
                   {},
                   [](Peers& p) {
                     auto id =
                         p.client.RegisterDataset({.definition = std::string(60 * kMiB, 'd')});
                     if (!id.ok()) return id.status();
                     auto def = p.client.GetDatasetDef(*id);
                     if (!def.ok()) return def.status();
                     return def->definition.size() == 60 * kMiB ? Status::Ok()
                                                                : InternalError("definition size");
                   },
                   Works()});
  cases.push_back({"three dataset definitions of 30 MiB at once (past the 64 MiB batch)",
                   "works",
                   {},
                   [](Peers& p) {
                     auto calls = kj::heapArrayBuilder<kj::Promise<uint64_t>>(3);
                     for (char c : {'a', 'b', 'c'}) {
                       auto request = p.client.dispatcher().getOrRegisterDatasetRequest();
                       request.setDefinition(Bytes(std::string(30 * kMiB, c)));
                       calls.add(request.send().then([](auto r) { return r.getDatasetId(); }));
                     }
                     auto ids = Try(p.loop, kj::joinPromises(calls.finish()));
                     if (!ids.ok()) return ids.status();
                     for (uint64_t id : *ids) {
                       auto def = p.client.GetDatasetDef(id);
                       if (!def.ok()) return def.status();
                       if (def->definition.size() != 30 * kMiB) return InternalError("size");
                     }
                     return Status::Ok();
                   },
                   Works(),
                   [](Peers& p) { EXPECT_EQ(p.client.ListDatasets()->size(), 3u); }});
  cases.push_back({"explicit split payloads over a record",
                   "error",
                   {},
                   [](Peers& p) {
                     return p.client
                         .RegisterDataset({.definition = "d",
                                           .explicit_splits = std::vector<std::string>(
                                               17, std::string(kMiB, 's'))})
                         .status();
                   },
                   Refused(StatusCode::kResourceExhausted, "journal record")});
  cases.push_back({"15 MiB of explicit split payloads, all in one getSplit",
                   "works",
                   {},
                   [](Peers& p) {
                     auto id = p.client.RegisterDataset(
                         {.definition = "d",
                          .explicit_splits = std::vector<std::string>(15, std::string(kMiB, 's'))});
                     if (!id.ok()) return id.status();
                     SimWorker worker(p.loop, p.dispatcher.address(), "w1");
                     DISPATCH_RETURN_IF_ERROR(worker.Heartbeat());
                     auto job = p.client.GetOrCreateJob(
                         {.dataset_id = *id, .mode = rpc::ProcessingMode::DYNAMIC});
                     if (!job.ok()) return job.status();
                     DISPATCH_RETURN_IF_ERROR(worker.Heartbeat());
                     auto task = worker.TaskOf(job->job_id);
                     if (!task.has_value()) return InternalError("no task");
                     auto splits = p.client.GetSplit(task->task_id, 0, 1, 100);
                     if (!splits.ok()) return splits.status();
                     return splits->payloads.size() == 15 ? Status::Ok() : InternalError("splits");
                   },
                   Works()});
  cases.push_back(
      {"getSplit of 1M indexed splits in one call (--max-splits-per-call=1048576)",
       "works",
       {"--max-splits-per-call=1048576"},
       [](Peers& p) {
         auto id = p.client.RegisterDataset({.definition = "d", .indexed_splits = 1u << 20});
         if (!id.ok()) return id.status();
         SimWorker worker(p.loop, p.dispatcher.address(), "w1");
         DISPATCH_RETURN_IF_ERROR(worker.Heartbeat());
         auto job =
             p.client.GetOrCreateJob({.dataset_id = *id, .mode = rpc::ProcessingMode::DYNAMIC});
         if (!job.ok()) return job.status();
         DISPATCH_RETURN_IF_ERROR(worker.Heartbeat());
         auto task = worker.TaskOf(job->job_id);
         if (!task.has_value()) return InternalError("no task");
         auto splits = p.client.GetSplit(task->task_id, 0, 1, 1u << 20);
         if (!splits.ok()) return splits.status();
         return splits->indices.size() == (1u << 20) ? Status::Ok() : InternalError("splits");
       },
       Works()});
  cases.push_back({"job name at --max-name-bytes",
                   "works",
                   {},
                   [](Peers& p) {
                     auto id = p.client.RegisterDataset({.definition = "d"});
                     if (!id.ok()) return id.status();
                     return p.client
                         .GetOrCreateJob({.dataset_id = *id, .name = std::string(4096, 'n')})
                         .status();
                   },
                   Works()});
  cases.push_back({"job name over --max-name-bytes",
                   "error",
                   {},
                   [](Peers& p) {
                     auto id = p.client.RegisterDataset({.definition = "d"});
                     if (!id.ok()) return id.status();
                     return p.client
                         .GetOrCreateJob({.dataset_id = *id, .name = std::string(4097, 'n')})
                         .status();
                   },
                   Refused(StatusCode::kInvalidArgument, "4096")});
  // ---- Workers ------------------------------------------------------------
  cases.push_back({"worker heartbeat with 20 MiB of tags (5120 x 4 KiB)",
                   "exit 3",
                   {},
                   [](Peers& p) {
                     Status status = p.Heartbeat("w1", 5120, 4096).status();
                     // On the same connection (a dropped one removes its worker).
                     EXPECT_TRUE(p.client.GetWorkers()->empty());
                     return status;
                   },
                   Refused(StatusCode::kResourceExhausted, "16777216")});
  cases.push_back({"worker heartbeat with 4 MiB of tags",
                   "works",
                   {},
                   [](Peers& p) {
                     Status status = p.Heartbeat("w1", 1024, 4096).status();
                     EXPECT_EQ(p.client.GetWorkers()->size(), 1u);
                     return status;
                   },
                   Works()});
  cases.push_back({"worker heartbeat listing 2M current tasks",
                   "works",
                   {},
                   [](Peers& p) { return p.Heartbeat("w1", 0, 0, 2u << 20).status(); },
                   Works()});
  cases.push_back(
      {"worker joining with 3000 unfinished jobs",
       "works",
       {},
       [](Peers& p) {
         auto id = p.client.RegisterDataset({.definition = "d"});
         if (!id.ok()) return id.status();
         // Pipelined, so that they share a few group commits.
         auto calls = kj::heapArrayBuilder<kj::Promise<void>>(3000);
         for (int i = 0; i < 3000; ++i) {
           auto request = p.client.dispatcher().getOrCreateJobRequest();
           request.initRequest().setDatasetId(*id);
           calls.add(request.send().ignoreResult());
         }
         DISPATCH_RETURN_IF_ERROR(
             Try(p.loop, kj::joinPromises(calls.finish()).then([]() { return 0; })).status());
         SimWorker worker(p.loop, p.dispatcher.address(), "w1");
         DISPATCH_RETURN_IF_ERROR(worker.Heartbeat());
         return worker.tasks().size() == 3000
                    ? Status::Ok()
                    : InternalError("tasks: " + std::to_string(worker.tasks().size()));
       },
       Works()});
  cases.push_back(
      {"worker with 4 KiB addresses joining 10000 jobs (80 MiB of new tasks)", "reply too large",
       {},
       [](Peers& p) {
         auto id = p.client.RegisterDataset({.definition = "d"});
         if (!id.ok()) return id.status();
         auto calls = kj::heapArrayBuilder<kj::Promise<void>>(10000);
         for (int i = 0; i < 10000; ++i) {
           auto request = p.client.dispatcher().getOrCreateJobRequest();
           request.initRequest().setDatasetId(*id);
           calls.add(request.send().ignoreResult());
         }
         DISPATCH_RETURN_IF_ERROR(
             Try(p.loop, kj::joinPromises(calls.finish()).then([]() { return 0; })).status());
         // Heartbeats that list what they got so far, until every task came.
         std::vector<uint64_t> current;
         for (int round = 0; round < 20 && current.size() < 10000; ++round) {
           auto request = p.client.dispatcher().workerHeartbeatRequest();
           auto r = request.initRequest();
           r.setAddress(std::string(4000, 'w'));
           r.setTransferAddress("tcp:" + std::string(4000, 't'));
           r.setWorkerIncarnation(5);
           auto list = r.initCurrentTasks(static_cast<unsigned>(current.size()));
           for (size_t i = 0; i < current.size(); ++i) list.set(static_cast<unsigned>(i), current[i]);
           auto fresh = Try(p.loop, request.send().then([](auto reply) {
             std::vector<uint64_t> ids;
             for (auto task : reply.getResponse().getNewTasks()) ids.push_back(task.getTaskId());
             return ids;
           }));
           if (!fresh.ok()) return fresh.status();
           if (fresh->empty()) return InternalError("a heartbeat brought no new task");
           current.insert(current.end(), fresh->begin(), fresh->end());
         }
         return current.size() == 10000 ? Status::Ok()
                                        : InternalError("tasks: " + std::to_string(current.size()));
       },
       Works()});
  cases.push_back({"workerUpdate of 3M progress entries",
                   "works",
                   {},
                   [](Peers& p) {
                     auto id = p.client.RegisterDataset({.definition = "d"});
                     if (!id.ok()) return id.status();
                     SimWorker worker(p.loop, p.dispatcher.address(), "w1");
                     DISPATCH_RETURN_IF_ERROR(worker.Heartbeat());
                     auto job = p.client.GetOrCreateJob({.dataset_id = *id});
                     if (!job.ok()) return job.status();
                     DISPATCH_RETURN_IF_ERROR(worker.Heartbeat());
                     auto task = worker.TaskOf(job->job_id);
                     if (!task.has_value()) return InternalError("no task");
                     auto request = worker.dispatcher().workerUpdateRequest();
                     request.setWorkerId(worker.worker_id());
                     auto list = request.initUpdates(3u << 20);  // 48 MiB: under the message limit
                     for (auto entry : list) {
                       entry.setTaskId(task->task_id);
                       entry.setCompleted(true);
                     }
                     return Try(p.loop, request.send().then([](auto) { return 0; })).status();
                   },
                   Works()});
  return cases;
}

// True when the dispatcher still runs and answers a ping.
bool Serving(Peers& peers) {
  if (!peers.dispatcher.process().running()) return false;
  auto ping = peers.client.dispatcher().pingRequest();
  ping.setPayload(Bytes("still there"));
  return Try(peers.loop, ping.send().then([](auto r) {
           return std::string(r.getPayload().asChars().begin(), r.getPayload().size());
         }))
      .ok();
}

// The 20 MiB schedule is journaled as several records that each fit; after a
// kill -9 the restart replays them all, and a retry with the same request ids
// gets the same closures back (nothing is queued twice).
TEST(UpdateSize, AScheduleCutIntoSeveralRecordsSurvivesAKill9Whole) {
  TempDir dir;
  {
    DispatcherProcess dispatcher({.work_dir = dir.path()});
    ClientLoop loop;
    Peers peers(loop, dispatcher);
    auto n = peers.Schedule(std::vector<size_t>(20, kMiB));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 20u);
    dispatcher.process().Signal(SIGKILL);
    dispatcher.process().Wait(std::chrono::seconds(10));
  }
  DispatcherProcess restarted({.work_dir = dir.path()});
  ClientLoop loop;
  Peers peers(loop, restarted);
  EXPECT_EQ(*peers.Queued(), 20u);
  auto again = peers.Schedule(std::vector<size_t>(20, kMiB));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*peers.Queued(), 20u);
}

class UpdateSizeSweep : public ::testing::TestWithParam<size_t> {};

TEST_P(UpdateSizeSweep, WorksOrGetsAClearErrorAndTheDispatcherKeepsServing) {
  SweepCase c = Cases()[GetParam()];
  SCOPED_TRACE(c.name);
  DispatcherProcess dispatcher({.extra_flags = c.flags});
  ClientLoop loop;
  {
    Peers peers(loop, dispatcher);
    Status status = c.call(peers);
    if (c.expect.works) {
      EXPECT_TRUE(status.ok()) << c.name << " (before: " << c.before << "): " << status.ToString();
    } else {
      EXPECT_EQ(status.code(), c.expect.code) << c.name << ": " << status.ToString();
      EXPECT_NE(status.message().find(c.expect.text), std::string::npos)
          << c.name << ": " << status.ToString();
    }
  }
  // A fresh connection: the dispatcher must still run and answer.
  ASSERT_TRUE(dispatcher.process().running())
      << c.name << " stopped the dispatcher (before: " << c.before << ")";
  std::unique_ptr<Peers> probe;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions(
                      [&]() { probe = std::make_unique<Peers>(loop, dispatcher); })) {
    FAIL() << c.name << ": cannot connect afterwards: " << e->getDescription().cStr();
  }
  ASSERT_TRUE(Serving(*probe)) << c.name << " stopped the dispatcher (before: " << c.before << ")";
  c.after(*probe);
}

std::string CaseName(const ::testing::TestParamInfo<size_t>& info) {
  std::string name;
  bool upper = true;
  for (char ch : std::string(Cases()[info.param].name)) {
    if (isalnum(static_cast<unsigned char>(ch))) {
      name += upper ? static_cast<char>(toupper(ch)) : ch;
      upper = false;
    } else {
      upper = true;
    }
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Inputs, UpdateSizeSweep, ::testing::Range<size_t>(0, Cases().size()),
                         CaseName);

}  // namespace
}  // namespace dispatch::testing
