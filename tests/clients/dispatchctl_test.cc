// dispatchctl as a user runs it against a dispatcher with a worker, a
// dataset and a named job: every listing prints, --json prints valid JSON,
// an unknown job fails with the dispatcher's message, usage errors exit 2.
#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <gtest/gtest.h>

#include <sstream>

#include "clients/dataset_client.h"
#include "clients/job_client.h"
#include "tests/clients/client_test_support.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"

namespace dispatch::testing {
namespace {

class DispatchctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    worker_ = std::make_unique<WorkerProcess>(
        dispatcher_.address(), std::vector<std::string>{"--hold-tasks", "--tags=gpu,eu"});
    ASSERT_NE(worker_->WaitRegistered(), 0u);
    conn_ = loop_.Connect(dispatcher_.address());
    dataset_ =
        loop_.Wait(clients::RegisterDataset(conn_->dispatcher(), DatasetOf("ctl", 10))).dataset_id;
    job_ = loop_.Wait(
        clients::JobClient::Create(conn_->dispatcher(), loop_.io().timer(),
                                   JobOf(dataset_, rpc::ProcessingMode::OFF, "ctl-job")));
    ASSERT_TRUE(WaitUntil([&] { return !job_->tasks().empty(); }, loop_));
  }

  CommandResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), "--dispatcher=" + dispatcher_.address());
    return RunDispatchctl(args);
  }

  // Held through a unique_ptr: KJ objects have throwing destructors, which a
  // gtest fixture's own destructor may not have.
  struct Env {
    DispatcherProcess dispatcher;
    ClientLoop loop;
    kj::Own<clients::DispatcherConnection> conn;
    kj::Own<clients::JobClient> job;
  };
  std::unique_ptr<Env> env_ = std::make_unique<Env>();
  DispatcherProcess& dispatcher_ = env_->dispatcher;
  ClientLoop& loop_ = env_->loop;
  kj::Own<clients::DispatcherConnection>& conn_ = env_->conn;
  kj::Own<clients::JobClient>& job_ = env_->job;
  std::unique_ptr<WorkerProcess> worker_;
  uint64_t dataset_ = 0;
};

void ExpectContains(const CommandResult& r, const std::string& text) {
  EXPECT_NE(r.output.find(text), std::string::npos) << "missing '" << text << "' in:\n" << r.output;
}

TEST_F(DispatchctlTest, PrintsEachListing) {
  std::string job = std::to_string(job_->job_id());
  std::string client = std::to_string(job_->job_client_id());
  auto workers = Ctl({"workers"});
  EXPECT_EQ(workers.exit_code, 0) << workers.output;
  ExpectContains(workers, "ADDRESS");
  ExpectContains(workers, worker_->address());
  ExpectContains(workers, "gpu,eu");
  auto datasets = Ctl({"datasets"});
  EXPECT_EQ(datasets.exit_code, 0) << datasets.output;
  ExpectContains(datasets, "FINGERPRINT");
  ExpectContains(datasets, std::to_string(dataset_));
  auto jobs = Ctl({"jobs"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.output;
  ExpectContains(jobs, "ctl-job");
  auto tasks = Ctl({"tasks"});
  EXPECT_EQ(tasks.exit_code, 0) << tasks.output;
  ExpectContains(tasks, std::to_string(job_->tasks()[0].task_id));
  ExpectContains(tasks, worker_->address());
  auto clients = Ctl({"clients"});
  EXPECT_EQ(clients.exit_code, 0) << clients.output;
  ExpectContains(clients, client);
  auto one = Ctl({"job", job});
  EXPECT_EQ(one.exit_code, 0) << one.output;
  ExpectContains(one, "ctl-job");
  ExpectContains(one, "tasks (1)");
  ExpectContains(one, client);
}

TEST_F(DispatchctlTest, PrintsValidJson) {
  capnp::JsonCodec codec;
  std::string job = std::to_string(job_->job_id());
  for (std::vector<std::string> args : {std::vector<std::string>{"workers"},
                                        {"datasets"},
                                        {"jobs"},
                                        {"tasks"},
                                        {"clients"},
                                        {"job", job}}) {
    args.push_back("--json");
    auto result = Ctl(args);
    ASSERT_EQ(result.exit_code, 0) << args[0] << ": " << result.output;
    capnp::MallocMessageBuilder message;
    auto root = message.initRoot<capnp::JsonValue>();
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                   codec.decodeRaw(kj::arrayPtr(result.output.data(), result.output.size()), root);
                 })) {
      ADD_FAILURE() << args[0] << " --json is not valid JSON: " << e->getDescription().cStr()
                    << "\n"
                    << result.output;
      continue;
    }
    EXPECT_EQ(root.which(), capnp::JsonValue::OBJECT) << args[0];
    ExpectContains(result, "\"incarnation\"");
  }
}

// The field `name` of a JSON object, or a null value when it has none.
capnp::JsonValue::Reader Field(capnp::JsonValue::Reader object, const char* name) {
  if (object.isObject()) {
    for (auto field : object.getObject()) {
      if (field.getName() == name) return field.getValue();
    }
  }
  return capnp::JsonValue::Reader();
}

// Decodes `text` into `message`; fails the test when it is not JSON.
capnp::JsonValue::Reader ParseJson(capnp::MallocMessageBuilder& message, const std::string& text) {
  auto root = message.initRoot<capnp::JsonValue>();
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 capnp::JsonCodec().decodeRaw(kj::arrayPtr(text.data(), text.size()), root);
               })) {
    ADD_FAILURE() << "not valid JSON: " << e->getDescription().cStr() << "\n" << text;
  }
  return root.asReader();
}

void ExpectStatsDocument(capnp::JsonValue::Reader doc) {
  ASSERT_TRUE(doc.isObject());
  EXPECT_TRUE(Field(Field(doc, "version"), "incarnation").isString());
  EXPECT_TRUE(Field(Field(doc, "server"), "uptimeMicros").isString());
  EXPECT_TRUE(Field(Field(doc, "server"), "callsTotal").isString());
  EXPECT_TRUE(Field(Field(doc, "closures"), "queued").isString());
  EXPECT_TRUE(Field(Field(doc, "closures"), "stuckEpisodes").isString());
  ASSERT_TRUE(Field(Field(doc, "workers"), "total").isNumber());
  EXPECT_EQ(Field(Field(doc, "workers"), "total").getNumber(), 1);
  EXPECT_EQ(Field(Field(doc, "workers"), "connected").getNumber(), 1);
  EXPECT_EQ(Field(Field(doc, "jobs"), "total").getNumber(), 1);
  EXPECT_EQ(Field(Field(doc, "jobs"), "unfinished").getNumber(), 1);
}

TEST_F(DispatchctlTest, StatsPrintsTheDispatchersFiguresAsTextAndJson) {
  auto text = Ctl({"stats"});
  ASSERT_EQ(text.exit_code, 0) << text.output;
  for (const char* expected : {"incarnation ", "connections  ", "rpc calls ", "loop         ",
                               "peer memory  ", "workers      1 (1 connected)",
                               "jobs         1 (1 unfinished, 0 without a worker)", "closures     waiting 0, queued 0",
                               "since start  scheduled 0", "stuck        0 closures now, 0 episodes"}) {
    ExpectContains(text, expected);
  }
  EXPECT_EQ(text.output.find("rates"), std::string::npos) << "stats has nothing to take a rate from";

  auto json = Ctl({"stats", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  capnp::MallocMessageBuilder message;
  ExpectStatsDocument(ParseJson(message, json.output));
}

TEST_F(DispatchctlTest, TopRefreshesWithRatesAndJsonLines) {
  auto text = Ctl({"top", "--interval=1", "--iterations=2"});
  ASSERT_EQ(text.exit_code, 0) << text.output;
  size_t frames = 0;
  for (size_t at = text.output.find("incarnation "); at != std::string::npos;
       at = text.output.find("incarnation ", at + 1)) {
    ++frames;
  }
  EXPECT_EQ(frames, 2u) << text.output;
  ExpectContains(text, "rates        closures finished 0.0/s, scheduled 0.0/s, rpc calls ");

  auto json = Ctl({"top", "--json", "--interval=1", "--iterations=2"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  std::istringstream lines(json.output);
  size_t documents = 0;
  for (std::string line; std::getline(lines, line);) {
    capnp::MallocMessageBuilder message;
    ExpectStatsDocument(ParseJson(message, line));
    ++documents;
  }
  EXPECT_EQ(documents, 2u) << json.output;
}

TEST_F(DispatchctlTest, FailsClearlyOnAnUnknownJob) {
  auto result = Ctl({"job", "987654321"});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  ExpectContains(result, "987654321");
  ExpectContains(result, "NotFound");
}

TEST(Dispatchctl, UsageErrorsExitTwoAndAnUnreachableDispatcherOne) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--dispatcher=tcp:127.0.0.1:1"},
        std::vector<std::string>{"--dispatcher=tcp:127.0.0.1:1", "frobnicate"},
        std::vector<std::string>{"--dispatcher=tcp:127.0.0.1:1", "job"},
        std::vector<std::string>{"--dispatcher=tcp:127.0.0.1:1", "job", "x"},
        std::vector<std::string>{"--dispatcher=tcp:127.0.0.1:1", "stats", "x"},
        std::vector<std::string>{"--dispatcher=tcp:127.0.0.1:1", "top", "--interval=0"},
        std::vector<std::string>{"workers"}, std::vector<std::string>{"--bogus", "workers"}}) {
    auto result = RunDispatchctl(args);
    EXPECT_EQ(result.exit_code, 2) << result.output;
  }
  // A Unix socket, removed when the dispatcher stops: a freed TCP port could
  // meanwhile be another process's, which would answer.
  TempDir dir;
  const std::string address = "unix:" + dir.File("gone.sock");
  {
    DispatcherProcess gone({.listen = address});
    ASSERT_TRUE(gone.Terminate().has_value());
  }
  auto result = RunDispatchctl({"--dispatcher=" + address, "workers"});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  ExpectContains(result, "Unavailable");
  auto stats = RunDispatchctl({"--dispatcher=" + address, "stats"});
  EXPECT_EQ(stats.exit_code, 1) << stats.output;
  ExpectContains(stats, "Unavailable");
}

}  // namespace
}  // namespace dispatch::testing
