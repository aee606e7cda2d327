// Closure results with real processes (issue 12): unfetched results live in
// the dispatcher's store, not its memory (its RSS stays far below what holding
// them would take), and every one is still fetched intact after a kill -9 and
// after snapshots; a result over --max-result-bytes, from 1 byte over to
// 100 MiB, fails its closure with an error naming the limit while the
// dispatcher keeps serving; a worker splits a report batch that would cross
// the connection's message limit.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "clients/pattern_bytes.h"
#include "clients/worker_agent.h"
#include "storage/result_file.h"
#include "storage/sqlite.h"
#include "tests/storage/test_util.h"
#include "tests/closures/closure_test_support.h"
#include "tests/integration/client_loop.h"

namespace dispatch::testing {
namespace {

using clients::ClosureCall;
using clients::ClosureOutput;
using clients::WorkerAgentStatus;

// VmRSS of a process in bytes (0 when unreadable).
uint64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// A coordinator at the protocol level: it schedules and fetches without
// keeping what it fetched (Coordinator keeps every outcome a session sends).
class RawCoordinator {
 public:
  RawCoordinator(ClientLoop& loop, const std::string& dispatcher, uint64_t id)
      : loop_(loop), conn_(loop.Connect(dispatcher)) {
    auto request = conn_->dispatcher().openCoordinatorRequest();
    request.setCoordinatorId(id);
    session_ = request.send().getCoordinator();
  }

  std::vector<uint64_t> Schedule(const std::vector<std::string>& args) {
    auto request = session_.scheduleRequest();
    auto list = request.initClosures(static_cast<unsigned>(args.size()));
    for (unsigned i = 0; i < args.size(); ++i) {
      list[i].setFunction("bytes");
      list[i].setArgs(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(args[i].data()),
                                          args[i].size()));
    }
    auto reply = loop_.Wait(request.send());
    std::vector<uint64_t> ids;
    for (uint64_t id : reply.getClosureIds()) ids.push_back(id);
    return ids;
  }

  // Fetches and releases `n` outcomes, checking each with `check` (closure
  // id, state, result, error), until the dispatcher holds `finished_after`
  // finished closures; returns how many came.
  template <typename Check>
  size_t FetchAndRelease(size_t n, uint64_t finished_after, Check check) {
    size_t got = 0;
    std::vector<uint64_t> release;
    while (got < n) {
      auto request = session_.awaitResultsRequest();
      auto list = request.initRelease(static_cast<unsigned>(release.size()));
      for (unsigned i = 0; i < release.size(); ++i) list.set(i, release[i]);
      request.setMaxResults(static_cast<uint32_t>(n - got));
      auto reply = loop_.Wait(request.send());
      release.clear();
      for (auto outcome : reply.getResults()) {
        auto bytes = outcome.getResult();
        check(outcome.getClosureId(), outcome.getState(),
              std::string_view(bytes.asChars().begin(), bytes.size()),
              std::string(outcome.getError().cStr()));
        release.push_back(outcome.getClosureId());
        ++got;
      }
    }
    // The last releases travel with one more awaitResults, which then waits;
    // this connection's closure stats say when they were applied.
    auto request = session_.awaitResultsRequest();
    auto list = request.initRelease(static_cast<unsigned>(release.size()));
    for (unsigned i = 0; i < release.size(); ++i) list.set(i, release[i]);
    pending_release_ = request.send().ignoreResult().eagerlyEvaluate(nullptr);
    EXPECT_TRUE(WaitUntil(
        [&]() {
          auto stats = loop_.Wait(conn_->dispatcher().getClosureStatsRequest().send());
          return stats.getStats().getFinished() <= finished_after;
        },
        loop_))
        << "the releases were not applied";
    return got;
  }

  rpc::Coordinator::Client& session() { return session_; }
  // getClosureStats on this connection.
  capnp::Response<rpc::Dispatcher::GetClosureStatsResults> Stats() {
    return loop_.Wait(conn_->dispatcher().getClosureStatsRequest().send());
  }

 private:
  ClientLoop& loop_;
  kj::Own<clients::DispatcherConnection> conn_;
  rpc::Coordinator::Client session_ = nullptr;
  kj::Promise<void> pending_release_ = nullptr;
};

int64_t CountResultRows(const std::string& db_path) {
  auto db = storage::OpenSqlite(db_path, SQLITE_OPEN_READONLY, db_path);
  if (!db.ok()) return -1;
  auto count = storage::QueryInt(db->get(), "SELECT count(*) FROM result", db_path);
  return count.ok() ? *count : -1;
}

TEST(ClosureResults, HeldResultsLiveInTheStoreNotInMemoryAndAllAreFetchedAfterKillAndSnapshot) {
  constexpr size_t kClosures = 2000;
  constexpr size_t kBytes = 256 << 10;
  constexpr uint64_t kHeld = kClosures * kBytes;  // 500 MiB
  // Snapshots every 500 records: several are taken while results are held.
  ClosureDispatcher dispatcher({"--snapshot-every=500", "--synchronous=normal"});
  std::vector<uint64_t> ids;
  std::map<uint64_t, uint64_t> seed_of;
  {
    ClientLoop loop;
    RawCoordinator coordinator(loop, dispatcher.address(), 71);
    for (size_t first = 0; first < kClosures; first += 500) {
      std::vector<std::string> args;
      for (size_t i = first; i < first + 500; ++i) args.push_back(std::to_string(kBytes) + ":" + std::to_string(i));
      for (uint64_t id : coordinator.Schedule(args)) ids.push_back(id);
    }
  }
  ASSERT_EQ(ids.size(), kClosures);
  for (size_t i = 0; i < kClosures; ++i) seed_of[ids[i]] = i;
  auto worker = StartClosureWorker(dispatcher.address(), 4);
  ASSERT_TRUE(WaitForCounters(
      dispatcher.address(), [](const ClosureCounters& c) { return c.finished == kClosures; },
      std::chrono::seconds(240)))
      << "not every closure finished";
  const uint64_t rss_held = RssBytes(dispatcher.process().process().pid());
  std::printf("dispatcher VmRSS with %zu unfetched results of %zu bytes (%llu MiB): %llu MiB\n",
              kClosures, kBytes, static_cast<unsigned long long>(kHeld >> 20),
              static_cast<unsigned long long>(rss_held >> 20));
  EXPECT_LT(rss_held, kHeld / 4) << "the dispatcher holds the results in memory";

  // kill -9: recovery replays the journal after the last snapshot; neither
  // brings result bytes back into memory.
  dispatcher.Kill9();
  dispatcher.Start();
  const uint64_t rss_recovered = RssBytes(dispatcher.process().process().pid());
  std::printf("dispatcher VmRSS after kill -9 and recovery: %llu MiB\n",
              static_cast<unsigned long long>(rss_recovered >> 20));
  EXPECT_LT(rss_recovered, kHeld / 4);

  auto check = [&](uint64_t id, rpc::ClosureState state, std::string_view result,
                   const std::string& error) {
    ASSERT_EQ(state, rpc::ClosureState::FINISHED) << "closure " << id << ": " << error;
    ASSERT_EQ(seed_of.count(id), 1u) << "closure " << id;
    ASSERT_TRUE(result == clients::PatternBytes(kBytes, seed_of[id])) << "closure " << id;
    seed_of.erase(id);
  };
  {
    ClientLoop loop;
    RawCoordinator coordinator(loop, dispatcher.address(), 71);
    EXPECT_EQ(coordinator.FetchAndRelease(kClosures / 2, kClosures - kClosures / 2, check),
              kClosures / 2);
  }
  // A clean stop writes a snapshot of what is left; the restart starts from it.
  auto stopped = dispatcher.process().Terminate();
  ASSERT_TRUE(stopped.has_value() && WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0);
  dispatcher.Start();
  {
    ClientLoop loop;
    RawCoordinator coordinator(loop, dispatcher.address(), 71);
    EXPECT_EQ(coordinator.FetchAndRelease(kClosures - kClosures / 2, 0, check),
              kClosures - kClosures / 2);
  }
  EXPECT_TRUE(seed_of.empty()) << seed_of.size() << " results never came";
  // Released rows leave the store a slice per commit, the last ones by the
  // delete timer once nothing else commits; a kill -9 after that changes
  // nothing.
  const std::string db = dispatcher.process().work_dir() + "/dispatch.db";
  EXPECT_TRUE(WaitUntil([&]() { return CountResultRows(db) == 0; }))
      << CountResultRows(db) << " released rows are still stored";
  dispatcher.Kill9();
  EXPECT_EQ(CountResultRows(db), 0);
}

using storage::testing::ReadFile;
using storage::testing::WriteFile;

// The result files in `dir`, by name (storage's own listing).
std::vector<std::string> ResultFiles(const std::string& dir) {
  std::vector<std::string> names;
  auto listing = storage::ListResultFiles(dir);
  EXPECT_TRUE(listing.ok()) << listing.status().ToString();
  if (!listing.ok()) return names;
  for (const storage::ResultFileId& id : listing->files)
    names.push_back(storage::ResultFileName(id.closure_id, id.attempt));
  std::sort(names.begin(), names.end());
  return names;
}

// Results of --result-file-bytes (1 MiB) or more each live in a file of
// their own, not a row; all come back intact after a kill -9; a file no
// closure holds (a crash between the file and its record) is removed at
// start; a damaged file or row is never served while the others are; and each file
// leaves with its closure's release (with --synchronous=normal too, where the
// removal syncs the journal first).
class LargeResults : public ::testing::TestWithParam<const char*> {};

INSTANTIATE_TEST_SUITE_P(Synchronous, LargeResults, ::testing::Values("full", "normal"));

TEST_P(LargeResults, LiveInFilesSurviveAKillAndLeaveWithTheirRelease) {
  constexpr size_t kLarge = 6;
  constexpr size_t kSmall = 3;
  constexpr size_t kLargeBytes = 3u << 20;
  constexpr size_t kSmallBytes = 4096;
  ClosureDispatcher dispatcher({std::string("--synchronous=") + GetParam()});
  std::vector<uint64_t> ids;
  std::map<uint64_t, std::pair<size_t, size_t>> expected;  // id -> (size, seed)
  {
    ClientLoop loop;
    RawCoordinator coordinator(loop, dispatcher.address(), 72);
    std::vector<std::string> args;
    for (size_t i = 0; i < kLarge + kSmall; ++i) {
      args.push_back(std::to_string(i < kLarge ? kLargeBytes : kSmallBytes) + ":" + std::to_string(i));
    }
    ids = coordinator.Schedule(args);
  }
  ASSERT_EQ(ids.size(), kLarge + kSmall);
  for (size_t i = 0; i < ids.size(); ++i) expected[ids[i]] = {i < kLarge ? kLargeBytes : kSmallBytes, i};
  auto worker = StartClosureWorker(dispatcher.address(), 2);
  ASSERT_TRUE(WaitForCounters(dispatcher.address(), [&](const ClosureCounters& c) {
    return c.finished == ids.size();
  })) << "not every closure finished";
  const std::string results = dispatcher.process().work_dir() + "/" + storage::kResultDirName;
  const std::string db = dispatcher.process().work_dir() + "/dispatch.db";
  std::vector<std::string> files = ResultFiles(results);
  ASSERT_EQ(files.size(), kLarge);
  for (size_t i = 0; i < kLarge; ++i) EXPECT_EQ(files[i], storage::ResultFileName(ids[i], 1));
  EXPECT_EQ(CountResultRows(db), static_cast<int64_t>(kSmall));

  const std::string orphan = results + "/" + storage::ResultFileName(ids.back() + 1000, 1);
  WriteFile(orphan, "left by a crash between the file and its record");
  dispatcher.Kill9();
  dispatcher.Start();
  EXPECT_FALSE(std::filesystem::exists(orphan)) << "a file no closure holds survived the start";
  EXPECT_EQ(ResultFiles(results), files);

  // One flipped byte in the body of the first large result.
  const std::string damaged = results + "/" + files[0];
  std::string bytes = ReadFile(damaged);
  bytes[storage::kResultFileHeaderBytes + 100] ^= 0x20;
  WriteFile(damaged, bytes);
  // And one small result's row, zeroed in place (its row checksum fails).
  // Both come in replies read on the thread pool (outcome_reply.h).
  const uint64_t damaged_row = ids[kLarge];
  dispatcher.Kill9();
  ASSERT_EQ(storage::testing::RawSql(db, "UPDATE result SET body = zeroblob(length(body)) "
                                         "WHERE closure = " + std::to_string(damaged_row)),
            "");
  dispatcher.Start();
  auto check = [&](uint64_t id, rpc::ClosureState state, std::string_view result,
                   const std::string& error) {
    ASSERT_EQ(expected.count(id), 1u) << "closure " << id;
    if (id == ids[0] || id == damaged_row) {
      EXPECT_EQ(state, rpc::ClosureState::FAILED) << "a damaged result was served";
      EXPECT_NE(error.find("DataLoss"), std::string::npos) << error;
      EXPECT_NE(error.find("closure " + std::to_string(id)), std::string::npos) << error;
    } else {
      ASSERT_EQ(state, rpc::ClosureState::FINISHED) << "closure " << id << ": " << error;
      auto [size, seed] = expected[id];
      EXPECT_TRUE(result == clients::PatternBytes(size, seed)) << "closure " << id;
    }
    expected.erase(id);
  };
  {
    ClientLoop loop;
    RawCoordinator coordinator(loop, dispatcher.address(), 72);
    EXPECT_EQ(coordinator.FetchAndRelease(ids.size(), 0, check), ids.size());
    // The files go once their releases are durable, on the thread pool.
    EXPECT_TRUE(WaitUntil([&]() { return ResultFiles(results).empty(); }, loop))
        << ResultFiles(results).size() << " result files outlived their release";
    EXPECT_TRUE(WaitUntil([&]() { return CountResultRows(db) == 0; }, loop))
        << CountResultRows(db) << " released rows are still stored";
  }
  EXPECT_TRUE(expected.empty()) << expected.size() << " outcomes never came";
  EXPECT_TRUE(dispatcher.process().process().running());
  dispatcher.Kill9();
  EXPECT_EQ(CountResultRows(db), 0);
}

// A closure's stored inputs of 64 KiB or more are read on the thread pool,
// not the loop, and pushed intact: a file (listed twice), a row and an
// inline result, in the order the closure names them. Scheduled at the
// protocol level, so that no reply reads a result before the push does.
TEST(ClosureResults, LargeInputsAreReadOffTheLoopAndPushedIntact) {
  ClosureDispatcher dispatcher;
  ClientLoop loop;
  RawCoordinator coordinator(loop, dispatcher.address(), 81);
  struct Spec {
    const char* function;
    std::string args;
  };
  const std::vector<Spec> specs = {{"bytes", "3000000:1"},  // over --result-file-bytes: a file
                                   {"bytes", "200000:2"},
                                   {"echo", "tiny"},
                                   {"concat", "!"}};
  // The concat's inputs: earlier closures of the same call (2^63 + index).
  const std::vector<uint64_t> inputs = {0, 1, 2, 0};
  auto request = coordinator.session().scheduleRequest();
  auto list = request.initClosures(static_cast<unsigned>(specs.size()));
  for (unsigned i = 0; i < specs.size(); ++i) {
    list[i].setFunction(specs[i].function);
    list[i].setArgs(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(specs[i].args.data()),
                                        specs[i].args.size()));
  }
  auto named = list[3].initInputs(static_cast<unsigned>(inputs.size()));
  for (unsigned i = 0; i < inputs.size(); ++i) named.set(i, (1ull << 63) + inputs[i]);
  auto reply = loop.Wait(request.send());
  ASSERT_EQ(reply.getClosureIds().size(), specs.size());
  const uint64_t concat_id = reply.getClosureIds()[3];
  auto worker = StartClosureWorker(dispatcher.address());
  ASSERT_TRUE(WaitUntil(
      [&]() { return coordinator.Stats().getStats().getResultsAccepted() == 4; }, loop))
      << "the dependant never finished";
  // Nothing was fetched yet: every read so far was an input's.
  auto pushed = coordinator.Stats().getStats();
  EXPECT_GE(pushed.getResultsReadOffLoop(), 2u) << "the file inputs were read on the loop";
  EXPECT_EQ(pushed.getResultsDamaged(), 0u);
  const std::string expected = clients::PatternBytes(3000000, 1) +
                               clients::PatternBytes(200000, 2) + "tiny" +
                               clients::PatternBytes(3000000, 1) + "!";
  EXPECT_EQ(pushed.getInputBytesPushed(), expected.size() - 1);
  bool concat_seen = false;
  coordinator.FetchAndRelease(
      specs.size(), 0,
      [&](uint64_t id, rpc::ClosureState state, std::string_view result, const std::string& error) {
        ASSERT_EQ(state, rpc::ClosureState::FINISHED) << "closure " << id << ": " << error;
        if (id != concat_id) return;
        concat_seen = true;
        EXPECT_EQ(result.size(), expected.size());
        EXPECT_TRUE(result == expected) << "the inputs came damaged or out of order";
      });
  EXPECT_TRUE(concat_seen);
}

// An input whose stored bytes were damaged (here: a flipped byte in its
// result file, while the dispatcher was down) is read on the thread pool,
// found damaged, and fails its dependant with the DataLoss naming the
// input; nothing damaged reaches a worker, and the dispatcher serves on.
TEST(ClosureResults, ADamagedInputFailsItsDependantNamingTheInput) {
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto input = coordinator->Schedule("bytes", "2000000:3");
  auto intact = coordinator->Schedule("bytes", "2000000:4");
  ASSERT_TRUE(input.ok() && intact.ok());
  auto worker = StartClosureWorker(dispatcher.address());
  ASSERT_TRUE(WaitForCounters(dispatcher.address(), [](const ClosureCounters& c) {
    return c.finished == 2;
  }));
  const std::string results = dispatcher.process().work_dir() + "/" + storage::kResultDirName;
  ASSERT_EQ(ResultFiles(results).size(), 2u);
  dispatcher.Kill9();
  const std::string damaged = results + "/" + storage::ResultFileName(input->closure_id(), 1);
  std::string bytes = ReadFile(damaged);
  bytes[storage::kResultFileHeaderBytes + 1000] ^= 0x01;
  WriteFile(damaged, bytes);
  dispatcher.Start();

  // The intact one first: the failure below is the coordinator's first
  // error, which cancels what is queued.
  auto fine = coordinator->Schedule("concat", "", After({*intact}));
  ASSERT_TRUE(fine.ok());
  Result<std::string> served = fine->FetchFor(kFetchDeadline);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_TRUE(*served == clients::PatternBytes(2000000, 4));
  auto dependant = coordinator->Schedule("concat", "", After({*input}));
  ASSERT_TRUE(dependant.ok());
  Result<std::string> failed = dependant->FetchFor(kFetchDeadline);
  ASSERT_FALSE(failed.ok()) << "a damaged input was pushed";
  EXPECT_NE(failed.status().message().find("DataLoss"), std::string::npos)
      << failed.status().ToString();
  EXPECT_NE(failed.status().message().find("input closure " + std::to_string(input->closure_id()) +
                                           " of closure " +
                                           std::to_string(dependant->closure_id())),
            std::string::npos)
      << failed.status().ToString();
  EXPECT_FALSE(coordinator->Join().ok()) << "the dependant's failure is the first error";
  ClosureCounters after = GetClosureCounters(dispatcher.address());
  // The push's read, and the coordinator's of the input's own outcome.
  EXPECT_GE(after.results_damaged, 1u);
  EXPECT_GE(after.results_read_off_loop, 1u);
  EXPECT_TRUE(dispatcher.process().process().running());
}

// Another session of the same coordinator may release outcomes while a
// reply of this one reads their results on the thread pool (files first,
// then rows, which the release deletes in its own commit): those are left
// out of the reply, gone for the coordinator, never served as DataLoss; a
// reply left with none waits like any awaitResults with nothing to report.
// Timing decides which way each round goes, so it runs several.
TEST(ClosureResults, OutcomesReleasedByAnotherSessionWhileTheyAreReadAreLeftOutNotLost) {
  constexpr int kRounds = 8;
  constexpr size_t kFiles = 3, kRows = 6;
  constexpr size_t kFileBytes = 2u << 20, kRowBytes = 200u << 10;
  // One reply carries all of a round (3 x 2 MiB files and 6 x 200 KiB rows).
  ClosureDispatcher dispatcher({"--synchronous=normal", "--max-result-bytes-per-call=16777216"});
  auto worker = StartClosureWorker(dispatcher.address(), 2);
  ClientLoop loop;
  size_t served = 0, left_out = 0, partial = 0;
  uint64_t kept = 0;  // finished closures not released (the files of rows-only rounds)
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t coordinator_id = 300 + round;
    RawCoordinator reader(loop, dispatcher.address(), coordinator_id);
    std::vector<std::string> args;
    for (size_t i = 0; i < kFiles + kRows; ++i) {
      args.push_back(std::to_string(i < kFiles ? kFileBytes : kRowBytes) + ":" + std::to_string(i));
    }
    std::vector<uint64_t> ids = reader.Schedule(args);
    ASSERT_EQ(ids.size(), args.size());
    ASSERT_TRUE(WaitUntil(
        [&]() { return reader.Stats().getStats().getFinished() == kept + ids.size(); }, loop))
        << "round " << round << ": not every closure finished";
    RawCoordinator releaser(loop, dispatcher.address(), coordinator_id);
    releaser.Stats();  // its session is open
    std::vector<std::string> problems;
    bool answered = false;
    auto read = reader.session().awaitResultsRequest().send().then(
        [&](capnp::Response<rpc::Coordinator::AwaitResultsResults> reply) {
          answered = true;
          for (auto outcome : reply.getResults()) {
            const size_t i = std::find(ids.begin(), ids.end(), outcome.getClosureId()) - ids.begin();
            auto bytes = outcome.getResult();
            if (outcome.getState() != rpc::ClosureState::FINISHED || i == ids.size() ||
                !(std::string_view(bytes.asChars().begin(), bytes.size()) ==
                  clients::PatternBytes(i < kFiles ? kFileBytes : kRowBytes, i))) {
              problems.push_back("closure " + std::to_string(outcome.getClosureId()) + ": " +
                                 outcome.getError().cStr());
            }
            ++served;
          }
        }).eagerlyEvaluate(nullptr);
    // A round trip on the other connection: the read has left, and most
    // likely begun, before the release goes.
    releaser.Stats();
    // Every other round releases the rows only: the files must then come.
    const bool rows_only = round % 2 == 1;
    const size_t first = rows_only ? kFiles : 0;
    auto release = releaser.session().awaitResultsRequest();
    auto list = release.initRelease(static_cast<unsigned>(ids.size() - first));
    for (unsigned i = 0; i < list.size(); ++i) list.set(i, ids[first + i]);
    auto released = release.send().ignoreResult().eagerlyEvaluate(nullptr);
    kept += rows_only ? kFiles : 0;
    ASSERT_TRUE(
        WaitUntil([&]() { return releaser.Stats().getStats().getFinished() == kept; }, loop))
        << "round " << round << ": the release was not applied";
    const size_t served_before = served;
    if (rows_only) {
      ASSERT_TRUE(WaitUntil([&]() { return answered; }, loop))
          << "round " << round << ": the outcomes not released never came";
      EXPECT_GE(served - served_before, kFiles) << "round " << round;
    }
    EXPECT_TRUE(problems.empty()) << "round " << round << ": " << problems.front();
    if (!answered) ++left_out;
    if (answered && served - served_before != ids.size()) ++partial;
  }
  EXPECT_EQ(RawCoordinator(loop, dispatcher.address(), 299).Stats().getStats().getResultsDamaged(),
            0u);
  RecordProperty("served", static_cast<int>(served));
  RecordProperty("rounds_left_out", static_cast<int>(left_out));
  RecordProperty("rounds_partial", static_cast<int>(partial));
}

// Kill -9 at any moment while large results (files) and small ones (rows)
// are produced, stored and fetched: every closure's result still comes back
// intact, exactly the bytes its function made, and once all are fetched and
// released no result file is left (files of writes a kill interrupted, and
// of releases a kill cut short, are removed by the next start). Four kills
// here; DISPATCH_RESULT_KILLS=N runs more (the soak in the note).
TEST(ClosureResults, LargeResultsComeBackIntactAcrossRepeatedKills) {
  const char* env = std::getenv("DISPATCH_RESULT_KILLS");
  const int kills = env != nullptr ? std::atoi(env) : 4;
  constexpr int kPerRound = 6;
  ClosureDispatcher dispatcher({"--closure-commit-hold-us=0"});
  auto worker = StartClosureWorker(dispatcher.address(), 2);
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<std::pair<clients::RemoteValue, std::pair<size_t, size_t>>> values;
  const std::string results = dispatcher.process().work_dir() + "/" + storage::kResultDirName;
  for (int round = 0; round < kills; ++round) {
    for (int i = 0; i < kPerRound; ++i) {
      const size_t seed = static_cast<size_t>(round * kPerRound + i);
      const size_t size = i % 2 == 0 ? (3u << 20) / 2 : 8192;  // a file, a row
      auto value = coordinator->Schedule("bytes", std::to_string(size) + ":" + std::to_string(seed));
      ASSERT_TRUE(value.ok()) << value.status().ToString();
      values.push_back({*value, {size, seed}});
    }
    // Some of the round are finished (and stored), the rest run or wait.
    ASSERT_TRUE(WaitForCounters(dispatcher.address(), [&](const ClosureCounters& c) {
      return c.finished + c.released_total >= values.size() - kPerRound + 2;
    })) << "round " << round;
    // The coordinator fetches and releases outcomes as they come, so
    // releases (and file removals) are in flight too.
    dispatcher.Kill9();
    dispatcher.Start();
  }
  for (auto& [value, expected] : values) {
    std::string bytes = FetchOrDie(value);
    EXPECT_TRUE(bytes == clients::PatternBytes(expected.first, expected.second))
        << "closure " << value.closure_id() << ": " << bytes.size() << " bytes, expected "
        << expected.first;
  }
  EXPECT_TRUE(coordinator->Join().ok());
  // Releases a kill cut short are not journaled: the dispatcher reports
  // those outcomes again to the next session, and a client that has all it
  // waits for asks for nothing more. After one more restart (no release
  // pending), a raw session with the same id drains and releases every
  // outcome still held, each intact; then no file may be left.
  const uint64_t id = coordinator->id();
  coordinator.reset();
  dispatcher.Kill9();
  dispatcher.Start();
  const uint64_t held = GetClosureCounters(dispatcher.address()).finished;
  EXPECT_LE(ResultFiles(results).size(), held) << "a file no finished closure holds survived a start";
  {
    ClientLoop loop;
    RawCoordinator raw(loop, dispatcher.address(), id);
    std::map<uint64_t, std::pair<size_t, size_t>> expected;
    for (auto& [value, e] : values) expected[value.closure_id()] = e;
    raw.FetchAndRelease(held, 0, [&](uint64_t closure, rpc::ClosureState state, std::string_view result,
                                     const std::string& error) {
      ASSERT_EQ(state, rpc::ClosureState::FINISHED) << "closure " << closure << ": " << error;
      ASSERT_EQ(expected.count(closure), 1u) << "closure " << closure;
      EXPECT_TRUE(result == clients::PatternBytes(expected[closure].first, expected[closure].second))
          << "closure " << closure;
    });
  }
  EXPECT_TRUE(WaitUntil([&]() { return ResultFiles(results).empty(); })) << [&]() {
    std::string text = "result files outlived their closures:";
    for (const std::string& name : ResultFiles(results)) text += " " + name;
    ClosureCounters c = GetClosureCounters(dispatcher.address());
    return text + "; the dispatcher holds " + std::to_string(c.finished) + " finished closures, " +
           std::to_string(c.released_total) + " released";
  }();
}

// A result file the disk refuses (here: results/ replaced by a plain file,
// so every open fails) is not the journal failing: the run ends as a
// transient error, retried like one, and the closure fails once the retries
// are spent, naming why; the dispatcher serves on, and small results (rows)
// still work.
TEST(ClosureResults, AResultFileTheDiskRefusesFailsItsRunNotTheDispatcher) {
  ClosureDispatcher dispatcher({"--closure-transient-retries=1"});
  const std::string results = dispatcher.process().work_dir() + "/" + storage::kResultDirName;
  std::filesystem::remove_all(results);
  WriteFile(results, "in the way");
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto large = coordinator->Schedule("bytes", std::to_string(2u << 20) + ":1");
  ASSERT_TRUE(large.ok());
  Result<std::string> fetched = large->FetchFor(kFetchDeadline);
  ASSERT_FALSE(fetched.ok()) << "a result was served although its file could not be written";
  EXPECT_NE(fetched.status().message().find("could not be stored"), std::string::npos)
      << fetched.status().ToString();
  ClosureCounters counters = GetClosureCounters(dispatcher.address());
  EXPECT_GE(counters.transient_retries, 1u);
  EXPECT_TRUE(dispatcher.process().process().running());
  (void)coordinator->Join();  // raises (and clears) the first error
  auto small = coordinator->Schedule("bytes", "1000:2");
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE(FetchOrDie(*small) == clients::PatternBytes(1000, 2));
}

TEST(ClosureResults, AHundredMiBResultFailsItsClosureNamingTheLimitAndTheDispatcherServesOn) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto huge = coordinator->Schedule("bytes", std::to_string(100u << 20));
  ASSERT_TRUE(huge.ok());
  Result<std::string> fetched = huge->FetchFor(kFetchDeadline);
  ASSERT_FALSE(fetched.ok());
  EXPECT_NE(fetched.status().message().find("104857600 bytes"), std::string::npos)
      << fetched.status().ToString();
  EXPECT_NE(fetched.status().message().find("--max-result-bytes"), std::string::npos)
      << fetched.status().ToString();
  EXPECT_NE(fetched.status().message().find("33554432"), std::string::npos)
      << fetched.status().ToString();
  ClosureCounters counters = GetClosureCounters(dispatcher.address());
  EXPECT_EQ(counters.put_back, 0u) << "retried, although it would be as large again";
  (void)coordinator->Join();  // raises (and clears) the first error
  auto next = coordinator->Schedule("echo", "still serving");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(FetchOrDie(*next), "still serving");
  EXPECT_TRUE(dispatcher.process().process().running());
}

TEST(ClosureResults, AResultOneByteOverTheLimitFailsAndOneAtTheLimitIsFetchedIntact) {
  ClosureDispatcher dispatcher;
  auto worker = StartClosureWorker(dispatcher.address(), 1);
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto at = coordinator->Schedule("bytes", std::to_string(32u << 20) + ":9");
  ASSERT_TRUE(at.ok());
  std::string result = FetchOrDie(*at);
  EXPECT_EQ(result.size(), 32u << 20);
  EXPECT_TRUE(result == clients::PatternBytes(32u << 20, 9));
  auto over = coordinator->Schedule("bytes", std::to_string((32u << 20) + 1));
  ASSERT_TRUE(over.ok());
  Result<std::string> fetched = over->FetchFor(kFetchDeadline);
  ASSERT_FALSE(fetched.ok());
  EXPECT_NE(fetched.status().message().find("33554433 bytes, over the dispatcher's limit of "
                                            "33554432 bytes (--max-result-bytes)"),
            std::string::npos)
      << fetched.status().ToString();
}

// Runs `closures` closures whose results are `bytes` long through one
// embedded worker, all in one loop pass so that their reports make one batch,
// fetches and checks every result, and returns the worker's status.
WorkerAgentStatus RunOneBatchOfResults(int closures, size_t bytes) {
  ClosureDispatcher dispatcher;
  auto coordinator = MakeCoordinator(dispatcher.address());
  std::vector<clients::RemoteValue> values;
  for (int i = 0; i < closures; ++i) {
    auto value = coordinator->Schedule("big", std::to_string(i));
    EXPECT_TRUE(value.ok());
    if (!value.ok()) return {};
    values.push_back(*value);
  }
  EXPECT_TRUE(WaitForCounters(dispatcher.address(), [&](const ClosureCounters& c) {
    return c.queued == static_cast<uint64_t>(closures);
  }));
  clients::WorkerAgentOptions options;
  options.dispatcher_address = dispatcher.address();
  options.worker_address = "agent-a";  // an identity: it serves nothing
  options.heartbeat_interval_ms = 50;
  options.max_closures = closures;
  auto agent = std::make_unique<clients::WorkerAgent>(options, std::make_unique<RecordingFactory>());
  // Inline: every closure of the one push runs in the same loop pass, so all
  // results are in the same batch.
  clients::ClosureFunctionOptions inline_options;
  inline_options.run_inline = true;
  EXPECT_TRUE(agent
                  ->RegisterFunction(
                      "big",
                      [bytes](const ClosureCall& call) {
                        return ClosureOutput::Result(
                            clients::PatternBytes(bytes, std::stoull(std::string(call.args()))));
                      },
                      inline_options)
                  .ok());
  EXPECT_TRUE(agent->Start().ok());
  for (int i = 0; i < closures; ++i) {
    std::string result = FetchOrDie(values[i]);
    EXPECT_TRUE(result == clients::PatternBytes(bytes, i)) << "closure " << i;
  }
  EXPECT_EQ(GetClosureCounters(dispatcher.address()).put_back, 0u);
  return agent->status();
}

// The worker learns the limit at registration and never sends a report the
// connection would refuse: 16 results of 8 MiB finished in one loop pass
// (128 MiB, twice the 64 MiB message limit) go in several calls.
TEST(ClosureResults, AWorkerSplitsAReportBatchThatWouldCrossTheMessageLimit) {
  WorkerAgentStatus status = RunOneBatchOfResults(16, 8u << 20);
  EXPECT_GE(status.closure_report_splits, 1u);
  EXPECT_GE(status.closure_report_calls, 4u);
  EXPECT_EQ(status.closure_reports_dropped, 0u);
}

// Several results go in one call only up to 15 MiB: the dispatcher reads a
// message into one array of its size, which past 16 MiB is mapped and zeroed
// afresh for every message on its loop thread. 8 results of 4 MiB (32 MiB,
// within the result limit) take at least 3 calls, not 2.
TEST(ClosureResults, AWorkerBatchesReportsOfSeveralResultsUpTo15MiBACall) {
  WorkerAgentStatus status = RunOneBatchOfResults(8, 4u << 20);
  EXPECT_GE(status.closure_report_calls, 3u);
  EXPECT_EQ(status.closure_reports_dropped, 0u);
}

TEST(ClosureResults, AnEmbeddedWorkerTurnsAResultOverTheLimitIntoTheErrorNamingIt) {
  ClosureDispatcher dispatcher({"--max-result-bytes=1000"});
  clients::WorkerAgentOptions options;
  options.dispatcher_address = dispatcher.address();
  options.worker_address = "agent-a";  // an identity: it serves nothing
  options.heartbeat_interval_ms = 50;
  options.max_closures = 1;
  auto agent = std::make_unique<clients::WorkerAgent>(options, std::make_unique<RecordingFactory>());
  ASSERT_TRUE(agent
                  ->RegisterFunction("sized",
                                     [](const ClosureCall& call) {
                                       return ClosureOutput::Result(
                                           std::string(std::stoull(std::string(call.args())), 's'));
                                     })
                  .ok());
  ASSERT_TRUE(agent->Start().ok());
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto over = coordinator->Schedule("sized", "1001");
  ASSERT_TRUE(over.ok());
  Result<std::string> fetched = over->FetchFor(kFetchDeadline);
  ASSERT_FALSE(fetched.ok());
  EXPECT_NE(fetched.status().message().find("1001 bytes, over the dispatcher's limit of 1000"),
            std::string::npos)
      << fetched.status().ToString();
  EXPECT_EQ(agent->status().closure_results_over_limit, 1u);
  (void)coordinator->Join();
  auto fits = coordinator->Schedule("sized", "1000");
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(FetchOrDie(*fits), std::string(1000, 's'));
}

}  // namespace
}  // namespace dispatch::testing
