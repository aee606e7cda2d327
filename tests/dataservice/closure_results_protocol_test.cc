// Closure results at the protocol level, from the worker side (issue 12): a
// test-side worker reports exactly what it wants (results over the limit, a
// report list of thousands of results, an error text of megabytes) and the
// dispatcher must give each a clear outcome and keep serving; replies that
// carry results are bounded by bytes; a damaged stored result is never served.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/dataservice/ds_test_util.h"
#include "tests/storage/test_util.h"

namespace dispatch::testing {
namespace {

using rpc::ClosureState;

struct Assignment {
  uint64_t closure_id = 0;
  uint32_t attempt = 0;
};

class AssignmentLog final : public rpc::WorkerControl::Server {
 public:
  explicit AssignmentLog(std::shared_ptr<std::vector<Assignment>> log) : log_(std::move(log)) {}

 protected:
  kj::Promise<void> startTasks(StartTasksContext) override { return kj::READY_NOW; }
  kj::Promise<void> deleteTasks(DeleteTasksContext) override { return kj::READY_NOW; }
  kj::Promise<void> runClosures(RunClosuresContext context) override {
    for (auto c : context.getParams().getClosures())
      log_->push_back({c.getClosureId(), c.getAttempt()});
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<std::vector<Assignment>> log_;
};

// What a report says: a result (bytes) or a user error (text).
struct Report {
  Assignment to;
  std::string bytes;
  bool error = false;
};

class RawWorker {
 public:
  RawWorker(ClientLoop& loop, const std::string& dispatcher, uint32_t slots)
      : loop_(loop), slots_(slots), log_(std::make_shared<std::vector<Assignment>>()),
        conn_(loop.Connect(dispatcher)) {}

  // Registers; returns the max result bytes the dispatcher announced.
  Result<uint64_t> Register() {
    auto request = conn_->dispatcher().workerHeartbeatRequest();
    auto r = request.initRequest();
    r.setAddress("raw-worker");
    r.setWorkerIncarnation(5);
    r.setMaxClosures(slots_);
    r.initFunctions(1).set(0, "f");  // the function every closure here runs
    r.setControl(kj::heap<AssignmentLog>(log_));
    auto reply = Try(loop_, request.send().then([](auto response) {
      return std::make_pair(response.getResponse().getWorkerId(),
                            response.getResponse().getMaxResultBytes());
    }));
    if (!reply.ok()) return reply.status();
    worker_id_ = reply->first;
    return reply->second;
  }

  bool WaitForAssignments(size_t n) {
    return WaitUntil([&]() { return log_->size() >= n; }, loop_);
  }
  const std::vector<Assignment>& assigned() const { return *log_; }

  // One reportClosures call with every report; returns how many were ignored.
  Result<uint32_t> Send(const std::vector<Report>& reports) {
    auto request = conn_->dispatcher().reportClosuresRequest();
    request.setWorkerId(worker_id_);
    auto list = request.initReports(static_cast<unsigned>(reports.size()));
    for (unsigned i = 0; i < reports.size(); ++i) {
      list[i].setClosureId(reports[i].to.closure_id);
      list[i].setAttempt(reports[i].to.attempt);
      if (reports[i].error) {
        list[i].setUserError(reports[i].bytes);
      } else {
        list[i].setResult(capnp::Data::Reader(
            reinterpret_cast<const kj::byte*>(reports[i].bytes.data()), reports[i].bytes.size()));
      }
    }
    return Try(loop_, request.send().then([](auto response) { return response.getIgnored(); }));
  }

 private:
  ClientLoop& loop_;
  uint32_t slots_;
  std::shared_ptr<std::vector<Assignment>> log_;
  kj::Own<clients::DispatcherConnection> conn_;
  uint64_t worker_id_ = 0;
};

struct Outcome {
  uint64_t closure_id = 0;
  ClosureState state = ClosureState::QUEUED;
  std::string result;
  std::string error;
};

class RawCoordinator {
 public:
  RawCoordinator(ClientLoop& loop, const std::string& dispatcher, uint64_t id)
      : loop_(loop), conn_(loop.Connect(dispatcher)) {
    auto request = conn_->dispatcher().openCoordinatorRequest();
    request.setCoordinatorId(id);
    session_ = request.send().getCoordinator();
  }

  Result<std::vector<uint64_t>> Schedule(size_t n) {
    auto request = session_.scheduleRequest();
    auto list = request.initClosures(static_cast<unsigned>(n));
    for (unsigned i = 0; i < n; ++i) list[i].setFunction("f");
    return Try(loop_, request.send().then([](auto response) {
      std::vector<uint64_t> ids;
      for (uint64_t id : response.getClosureIds()) ids.push_back(id);
      return ids;
    }));
  }

  Result<std::vector<Outcome>> Await(const std::vector<uint64_t>& release = {}) {
    auto request = session_.awaitResultsRequest();
    auto list = request.initRelease(static_cast<unsigned>(release.size()));
    for (unsigned i = 0; i < release.size(); ++i) list.set(i, release[i]);
    return Try(loop_, request.send().then([](auto response) { return Copy(response.getResults()); }));
  }

  Result<std::vector<Outcome>> Outcomes(const std::vector<uint64_t>& ids) {
    auto request = session_.getOutcomesRequest();
    auto list = request.initClosureIds(static_cast<unsigned>(ids.size()));
    for (unsigned i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
    return Try(loop_, request.send().then([](auto response) { return Copy(response.getOutcomes()); }));
  }

  // Awaits (releasing what it got) until `n` outcomes came; each reply's
  // result bytes go to `reply_bytes`.
  std::vector<Outcome> AwaitAll(size_t n, std::vector<uint64_t>* reply_bytes = nullptr) {
    std::vector<Outcome> all;
    std::vector<uint64_t> release;
    while (all.size() < n) {
      auto got = Await(release);
      if (!got.ok()) {
        ADD_FAILURE() << got.status().ToString();
        break;
      }
      release.clear();
      uint64_t bytes = 0;
      for (Outcome& o : *got) {
        bytes += o.result.size();
        release.push_back(o.closure_id);
        all.push_back(std::move(o));
      }
      if (reply_bytes != nullptr) reply_bytes->push_back(bytes);
    }
    return all;
  }

 private:
  static std::vector<Outcome> Copy(capnp::List<rpc::ClosureOutcome>::Reader list) {
    std::vector<Outcome> out;
    for (auto r : list) {
      out.push_back({r.getClosureId(), r.getState(),
                     std::string(r.getResult().asChars().begin(), r.getResult().size()),
                     r.getError().cStr()});
    }
    return out;
  }

  ClientLoop& loop_;
  kj::Own<clients::DispatcherConnection> conn_;
  rpc::Coordinator::Client session_ = nullptr;
};

std::string Filled(uint64_t id, size_t size) {
  std::string out(size, '\0');
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<char>(id * 37 + i * 11 + i / 1000);
  return out;
}

struct ResultStats {
  uint64_t over_limit = 0, damaged = 0, put_back = 0, stored = 0;
};

ResultStats Stats(ClientLoop& loop, DsClient& admin) {
  auto reply = loop.Wait(admin.dispatcher().getClosureStatsRequest().send());
  auto s = reply.getStats();
  return {s.getResultsOverLimit(), s.getResultsDamaged(), s.getPutBack(), s.getResultsStored()};
}

// Old dispatchers journaled the results inside the record: 5,000 results of
// 4 KiB (20 MB) made one record over the 16 MiB limit and stopped the
// dispatcher (exit 3).
TEST(ClosureResults, AReportOfThousandsOfResultsIsAcceptedAndEveryResultFetched) {
  constexpr size_t kClosures = 5000;
  DispatcherProcess dispatcher;
  ClientLoop loop;
  RawWorker worker(loop, dispatcher.address(), kClosures);
  ASSERT_TRUE(worker.Register().ok());
  RawCoordinator coordinator(loop, dispatcher.address(), 61);
  auto ids = coordinator.Schedule(kClosures);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_TRUE(worker.WaitForAssignments(kClosures));
  std::vector<Report> reports;
  for (const Assignment& a : worker.assigned()) reports.push_back({a, Filled(a.closure_id, 4096)});
  auto ignored = worker.Send(reports);
  ASSERT_TRUE(ignored.ok()) << ignored.status().ToString();
  EXPECT_EQ(*ignored, 0u);
  std::vector<Outcome> outcomes = coordinator.AwaitAll(kClosures);
  ASSERT_EQ(outcomes.size(), kClosures);
  for (const Outcome& o : outcomes) {
    ASSERT_EQ(o.state, ClosureState::FINISHED) << o.error;
    ASSERT_EQ(o.result, Filled(o.closure_id, 4096)) << "closure " << o.closure_id;
  }
  EXPECT_TRUE(dispatcher.process().running());
}

// A worker that names a closure twice in one call (a retried send merged with
// a new one) has the second report ignored: the closure finishes once, with
// the first report's result, and the dispatcher keeps serving.
TEST(ClosureResults, AClosureReportedTwiceInOneCallFinishesOnceWithTheFirstResult) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  RawWorker worker(loop, dispatcher.address(), 3);
  ASSERT_TRUE(worker.Register().ok());
  RawCoordinator coordinator(loop, dispatcher.address(), 62);
  auto ids = coordinator.Schedule(3);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_TRUE(worker.WaitForAssignments(3));
  const std::vector<Assignment>& a = worker.assigned();
  auto ignored = worker.Send({{a[2], "first"}, {a[0], "zero"}, {a[2], "second"}, {a[1], "one"}});
  ASSERT_TRUE(ignored.ok()) << ignored.status().ToString();
  EXPECT_EQ(*ignored, 1u);
  std::vector<Outcome> outcomes = coordinator.AwaitAll(3);
  ASSERT_EQ(outcomes.size(), 3u);
  for (const Outcome& o : outcomes) {
    ASSERT_EQ(o.state, ClosureState::FINISHED) << o.error;
    const std::string expected = o.closure_id == a[2].closure_id   ? "first"
                                 : o.closure_id == a[0].closure_id ? "zero"
                                                                   : "one";
    EXPECT_EQ(o.result, expected) << "closure " << o.closure_id;
  }
  EXPECT_TRUE(dispatcher.process().running());
}

// Old dispatchers: 20 MiB results made a 20 MiB record: exit 3. Now results up
// to --max-result-bytes (32 MiB by default) are stored apart and fetched intact.
TEST(ClosureResults, AResultOverTheRecordLimitIsStoredApartAndFetchedIntact) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  RawWorker worker(loop, dispatcher.address(), 1);
  auto announced = worker.Register();
  ASSERT_TRUE(announced.ok());
  EXPECT_EQ(*announced, 32u << 20);
  RawCoordinator coordinator(loop, dispatcher.address(), 62);
  ASSERT_TRUE(coordinator.Schedule(1).ok());
  ASSERT_TRUE(worker.WaitForAssignments(1));
  const Assignment a = worker.assigned()[0];
  ASSERT_EQ(*worker.Send({{a, Filled(a.closure_id, 20u << 20)}}), 0u);
  std::vector<Outcome> outcomes = coordinator.AwaitAll(1);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].state, ClosureState::FINISHED) << outcomes[0].error;
  EXPECT_TRUE(outcomes[0].result == Filled(a.closure_id, 20u << 20));
  EXPECT_TRUE(dispatcher.process().running());
}

TEST(ClosureResults, AResultOverTheLimitFailsItsClosureNamingTheLimitWithoutARetry) {
  DispatcherProcess dispatcher({.extra_flags = {"--max-result-bytes=65536"}});
  ClientLoop loop;
  DsClient admin(loop, dispatcher.address());
  RawWorker worker(loop, dispatcher.address(), 2);
  auto announced = worker.Register();
  ASSERT_TRUE(announced.ok()) << announced.status().ToString();
  EXPECT_EQ(*announced, 65536u);
  RawCoordinator coordinator(loop, dispatcher.address(), 63);
  auto ids = coordinator.Schedule(2);
  ASSERT_TRUE(ids.ok());
  ASSERT_TRUE(worker.WaitForAssignments(2));
  const Assignment over = worker.assigned()[0];
  const Assignment at = worker.assigned()[1];
  ASSERT_EQ(*worker.Send({{over, std::string(65537, 'o')}, {at, std::string(65536, 'a')}}), 0u);
  std::vector<Outcome> outcomes = coordinator.AwaitAll(2);
  ASSERT_EQ(outcomes.size(), 2u);
  for (const Outcome& o : outcomes) {
    if (o.closure_id == over.closure_id) {
      EXPECT_EQ(o.state, ClosureState::FAILED);
      EXPECT_NE(o.error.find("65537 bytes"), std::string::npos) << o.error;
      EXPECT_NE(o.error.find("--max-result-bytes"), std::string::npos) << o.error;
      EXPECT_NE(o.error.find("65536"), std::string::npos) << o.error;
    } else {
      EXPECT_EQ(o.state, ClosureState::FINISHED) << o.error;
      EXPECT_EQ(o.result, std::string(65536, 'a'));
    }
  }
  ResultStats stats = Stats(loop, admin);
  EXPECT_EQ(stats.over_limit, 1u);
  EXPECT_EQ(stats.put_back, 0u);  // not retried: it would be as large again
  EXPECT_EQ(worker.assigned().size(), 2u);
}

// Old dispatchers journaled the whole text: a 20 MiB error made a record over
// the limit and stopped the dispatcher (exit 3).
TEST(ClosureResults, AnErrorTextOfMegabytesIsCutAndTheDispatcherKeepsServing) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  RawWorker worker(loop, dispatcher.address(), 1);
  ASSERT_TRUE(worker.Register().ok());
  RawCoordinator coordinator(loop, dispatcher.address(), 64);
  ASSERT_TRUE(coordinator.Schedule(1).ok());
  ASSERT_TRUE(worker.WaitForAssignments(1));
  ASSERT_EQ(*worker.Send({{worker.assigned()[0], std::string(20u << 20, 'e'), true}}), 0u);
  std::vector<Outcome> outcomes = coordinator.AwaitAll(1);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].state, ClosureState::FAILED);
  EXPECT_LT(outcomes[0].error.size(), 70000u);
  EXPECT_NE(outcomes[0].error.find("more bytes cut"), std::string::npos);
  auto more = coordinator.Schedule(1);
  EXPECT_TRUE(more.ok()) << more.status().ToString();
  EXPECT_TRUE(dispatcher.process().running());
}

TEST(ClosureResults, RepliesCarryingResultsAreBoundedByBytes) {
  constexpr size_t kClosures = 8;
  DispatcherProcess dispatcher({.extra_flags = {"--max-result-bytes-per-call=1048576"}});
  ClientLoop loop;
  RawWorker worker(loop, dispatcher.address(), kClosures);
  ASSERT_TRUE(worker.Register().ok());
  RawCoordinator coordinator(loop, dispatcher.address(), 65);
  auto ids = coordinator.Schedule(kClosures);
  ASSERT_TRUE(ids.ok());
  ASSERT_TRUE(worker.WaitForAssignments(kClosures));
  std::vector<Report> reports;
  for (const Assignment& a : worker.assigned()) reports.push_back({a, Filled(a.closure_id, 400000)});
  ASSERT_EQ(*worker.Send(reports), 0u);
  // Several at once cannot come back together from getOutcomes...
  auto too_many = coordinator.Outcomes(*ids);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(too_many.status().message().find("--max-result-bytes-per-call"), std::string::npos)
      << too_many.status().ToString();
  auto one = coordinator.Outcomes({(*ids)[0]});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ((*one)[0].result, Filled((*ids)[0], 400000));
  // ... and awaitResults hands them out two per reply (800,000 bytes).
  std::vector<uint64_t> reply_bytes;
  std::vector<Outcome> outcomes = coordinator.AwaitAll(kClosures, &reply_bytes);
  ASSERT_EQ(outcomes.size(), kClosures);
  for (uint64_t bytes : reply_bytes) EXPECT_LE(bytes, 1048576u);
  EXPECT_GE(reply_bytes.size(), 4u);
  for (const Outcome& o : outcomes) EXPECT_EQ(o.result, Filled(o.closure_id, 400000));
}

TEST(ClosureResults, ADamagedStoredResultIsNeverServedAndNamesItsClosure) {
  TempDir dir;
  std::vector<uint64_t> ids;
  {
    DispatcherProcess dispatcher({.work_dir = dir.path()});
    ClientLoop loop;
    RawWorker worker(loop, dispatcher.address(), 2);
    ASSERT_TRUE(worker.Register().ok());
    RawCoordinator coordinator(loop, dispatcher.address(), 66);
    ids = *coordinator.Schedule(2);
    ASSERT_TRUE(worker.WaitForAssignments(2));
    std::vector<Report> reports;
    for (const Assignment& a : worker.assigned()) reports.push_back({a, Filled(a.closure_id, 5000)});
    ASSERT_EQ(*worker.Send(reports), 0u);
    auto stopped = dispatcher.Terminate();
    ASSERT_TRUE(stopped.has_value() && WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0);
  }
  const std::string db = dir.path() + "/dispatch.db";
  ASSERT_EQ(storage::testing::RawSql(
                db, "UPDATE result SET body = zeroblob(length(body)) WHERE closure = " +
                        std::to_string(ids[0])),
            "");
  DispatcherProcess restarted({.work_dir = dir.path()});
  ClientLoop loop;
  RawCoordinator coordinator(loop, restarted.address(), 66);
  std::vector<Outcome> outcomes = coordinator.AwaitAll(2);
  ASSERT_EQ(outcomes.size(), 2u);
  for (const Outcome& o : outcomes) {
    if (o.closure_id == ids[0]) {
      EXPECT_EQ(o.state, ClosureState::FAILED);
      EXPECT_TRUE(o.result.empty());
      EXPECT_NE(o.error.find("DataLoss"), std::string::npos) << o.error;
      EXPECT_NE(o.error.find("closure " + std::to_string(ids[0])), std::string::npos) << o.error;
    } else {
      EXPECT_EQ(o.state, ClosureState::FINISHED);
      EXPECT_EQ(o.result, Filled(o.closure_id, 5000));
    }
  }
  DsClient admin(loop, restarted.address());
  EXPECT_EQ(Stats(loop, admin).damaged, 1u);
}

}  // namespace
}  // namespace dispatch::testing
