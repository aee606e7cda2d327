// The dispatcher's HTTP endpoints (--http): /metrics in Prometheus text
// format (checked by promtool when it is installed), /healthz, /readyz, the
// bearer token, and the limit on open HTTP connections. A real dispatcher
// process on loopback, its HTTP on a port the kernel picked.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <capnp/compat/json.h>
#include <capnp/message.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/client_loop.h"
#include "tests/integration/probe.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/http_get.h"
#include "tests/support/raw_socket.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_until.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

bool HasPromtool() { return system("command -v promtool >/dev/null 2>&1") == 0; }

// Runs `promtool check metrics` on `text`; returns its exit code and output.
int PromtoolCheck(const std::string& text, std::string* out) {
  TempDir dir;
  const std::string file = dir.File("metrics.txt");
  std::ofstream(file) << text;
  Subprocess check({"/bin/sh", "-c", "exec promtool check metrics < '" + file + "' 2>&1"});
  while (auto line = check.ReadLine(30s)) *out += *line + "\n";
  auto status = check.Wait(30s);
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

TEST(HttpEndpoints, MetricsCountCallsByMethodAndPassPromtool) {
  DispatcherProcess dispatcher;
  ASSERT_FALSE(dispatcher.http_url().empty());
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  for (int i = 0; i < 3; ++i) probe.PingOk();
  auto job = probe.conn->dispatcher().getJobRequest();
  job.setJobId(12345);
  EXPECT_ANY_THROW(loop.Wait(job.send()));
  const uint64_t incarnation =
      loop.Wait(probe.conn->dispatcher().getVersionRequest().send()).getVersion().getIncarnation();

  HttpResponse metrics = HttpGet(dispatcher.http_url(), "/metrics");
  ASSERT_EQ(metrics.status, 200) << metrics.body;
  EXPECT_EQ(metrics.headers["content-type"].rfind("text/plain; version=0.0.4", 0), 0u)
      << metrics.headers["content-type"];
  const std::string& text = metrics.body;
  const std::vector<std::string> wanted = {
       std::string("dispatch_rpc_calls_total{interface=\"Dispatcher\",method=\"ping\"} 3\n"),
        std::string("dispatch_rpc_errors_total{interface=\"Dispatcher\",method=\"getJob\",code=\"NotFound\"} 1\n"),
        std::string("dispatch_rpc_calls_total{interface=\"Gateway\",method=\"authenticate\"} 1\n"),
        std::string("dispatch_rpc_latency_seconds_count{interface=\"Dispatcher\",method=\"ping\"} 3\n"),
        std::string("dispatch_build_info{version=\""), "incarnation=\"" + std::to_string(incarnation) + "\"} 1\n",
        std::string("dispatch_workers 0\n"), std::string("dispatch_closures{state=\"queued\"} 0\n"),
        std::string("# TYPE dispatch_journal_commit_seconds histogram\n"),
        std::string("# TYPE dispatch_loop_lag_seconds histogram\n"),
        std::string("dispatch_limit_crossings_total{limit=\"max_message_bytes\"} 0\n"),
        std::string("process_resident_memory_bytes "), std::string("dispatch_uptime_seconds ")};
  for (const std::string& expected : wanted) {
    EXPECT_NE(text.find(expected), std::string::npos) << "missing: " << expected << "\n" << text;
  }
  if (!HasPromtool()) {
    GTEST_SKIP() << "promtool is not installed (Debian package `prometheus`; scripts/bootstrap.sh "
                    "installs it): the exposition format was NOT checked";
  }
  std::string said;
  EXPECT_EQ(PromtoolCheck(text, &said), 0) << said << "\n" << text;
}

TEST(HttpEndpoints, HealthAndReadinessAnswer) {
  DispatcherProcess dispatcher;
  HttpResponse health = HttpGet(dispatcher.http_url(), "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok\n");
  HttpResponse ready = HttpGet(dispatcher.http_url(), "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, "ready\n");
  EXPECT_EQ(HttpGet(dispatcher.http_url(), "/no-such-page").status, 404);
}

TEST(HttpEndpoints, ATokenIsRequiredWhenSet) {
  DispatcherProcess dispatcher({.extra_flags = {"--token=sesame"}});
  int refused = 0;
  for (const char* path : {"/metrics", "/healthz", "/readyz"}) {
    HttpResponse none = HttpGet(dispatcher.http_url(), path);
    EXPECT_EQ(none.status, 401) << path;
    EXPECT_EQ(none.headers["www-authenticate"], "Bearer realm=\"dispatch\"") << path;
    EXPECT_EQ(none.body.find("dispatch_"), std::string::npos) << path << ": " << none.body;
    EXPECT_EQ(HttpGet(dispatcher.http_url(), path, "wrong").status, 401) << path;
    EXPECT_EQ(HttpGet(dispatcher.http_url(), path, "sesamf").status, 401) << path;
    refused += 3;
    EXPECT_EQ(HttpGet(dispatcher.http_url(), path, "sesame").status, 200) << path;
  }
  HttpResponse metrics = HttpGet(dispatcher.http_url(), "/metrics", "sesame");
  EXPECT_NE(metrics.body.find("dispatch_http_unauthorized_total " + std::to_string(refused) + "\n"),
            std::string::npos)
      << metrics.body;
}

TEST(HttpEndpoints, ConnectionsOverTheLimitAreClosedAndCounted) {
  DispatcherProcess dispatcher({.extra_flags = {"--http-max-connections=2"}});
  const std::string address = HttpTcpAddress(dispatcher.http_url());
  auto first = std::make_unique<RawSocket>(address);
  RawSocket second(address);
  // Accepted in order: the third is over the limit and closed at once.
  RawSocket third(address);
  EXPECT_TRUE(third.PeerClosesWithin(10s));
  // A slot freed is a slot usable again.
  first.reset();
  HttpResponse metrics;
  ASSERT_TRUE(WaitUntil([&] {
    metrics = HttpGet(dispatcher.http_url(), "/metrics");
    return metrics.status == 200;
  }));
  EXPECT_NE(metrics.body.find("dispatch_http_connections_refused_total "), std::string::npos);
  EXPECT_EQ(metrics.body.find("dispatch_http_connections_refused_total 0\n"), std::string::npos)
      << metrics.body;
}

// Registers a worker at `address` through a plain heartbeat (no WorkerControl).
void Register(ClientLoop& loop, Probe& probe, const std::string& address, uint32_t slots) {
  auto request = probe.conn->dispatcher().workerHeartbeatRequest();
  auto heartbeat = request.initRequest();
  heartbeat.setAddress(address);
  heartbeat.setTransferAddress(address);
  heartbeat.setWorkerIncarnation(7);
  heartbeat.setMaxClosures(slots);
  loop.Wait(request.send());
}

// Finds the member `name` of a JSON object; fails the test when it is absent.
capnp::JsonValue::Reader Member(capnp::JsonValue::Reader object, const char* name) {
  EXPECT_TRUE(object.isObject());
  for (auto field : object.getObject()) {
    if (field.getName() == name) return field.getValue();
  }
  ADD_FAILURE() << "no member " << name;
  return capnp::JsonValue::Reader();
}

TEST(HttpEndpoints, StatusDocumentListsWorkersJobsAndHistoryWithinItsBounds) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  const uint64_t incarnation =
      loop.Wait(probe.conn->dispatcher().getVersionRequest().send()).getVersion().getIncarnation();
  // One more than the document lists (kMaxWorkersListed, 200).
  constexpr int kWorkers = 201;
  for (int i = 0; i < kWorkers; ++i) Register(loop, probe, "tcp:127.0.0.1:" + std::to_string(20000 + i), 3);

  HttpResponse status;
  capnp::MallocMessageBuilder message;
  auto doc = message.initRoot<capnp::JsonValue>();
  // The history gets its first sample within about two seconds of the start.
  ASSERT_TRUE(WaitUntil([&] {
    status = HttpGet(dispatcher.http_url(), "/api/status");
    if (status.status != 200) return false;
    capnp::JsonCodec().decodeRaw(kj::StringPtr(status.body.c_str()), doc);
    return Member(Member(doc, "history"), "unixSeconds").getArray().size() > 0;
  }));
  EXPECT_EQ(status.headers["content-type"], "application/json");
  EXPECT_EQ(Member(doc, "incarnation").getString(), std::to_string(incarnation));
  EXPECT_TRUE(Member(doc, "ready").getBoolean());
  EXPECT_EQ(Member(doc, "workersTotal").getNumber(), kWorkers);
  auto workers = Member(doc, "workers").getArray();
  ASSERT_EQ(workers.size(), 200u);
  EXPECT_EQ(Member(workers[0], "address").getString(), "tcp:127.0.0.1:20000");
  EXPECT_EQ(Member(workers[0], "closureSlots").getNumber(), 0);  // no WorkerControl: no closures
  EXPECT_TRUE(Member(workers[0], "connected").getBoolean());
  EXPECT_GE(Member(workers[0], "secondsSinceHeartbeat").getNumber(), 0);
  for (const char* series : {"closuresFinishedPerSecond", "heartbeatsPerSecond", "commitP50Ms", "commitP99Ms",
                             "loopLagMs"}) {
    EXPECT_EQ(Member(Member(doc, "history"), series).getArray().size(),
              Member(Member(doc, "history"), "unixSeconds").getArray().size())
        << series;
  }
  EXPECT_TRUE(Member(doc, "jobs").isArray());
  EXPECT_TRUE(Member(doc, "coordinators").isArray());
  EXPECT_EQ(Member(Member(doc, "closures"), "queued").getNumber(), 0);
}

TEST(HttpEndpoints, ThePageIsSelfContainedAndPublicButItsDataNeedsTheToken) {
  DispatcherProcess dispatcher({.extra_flags = {"--token=sesame"}});
  HttpResponse page = HttpGet(dispatcher.http_url(), "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.headers["content-type"], "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("api/status"), std::string::npos);
  // No external assets: nothing is loaded from elsewhere.
  for (const char* external : {"src=\"http", "href=\"http", "<link", "src=\"//"}) {
    EXPECT_EQ(page.body.find(external), std::string::npos) << external;
  }
  EXPECT_EQ(HttpGet(dispatcher.http_url(), "/api/status").status, 401);
  EXPECT_EQ(HttpGet(dispatcher.http_url(), "/api/status", "sesame").status, 200);
}

TEST(HttpEndpoints, OffServesNoHttp) {
  DispatcherProcess dispatcher({.extra_flags = {"--http=off"}});
  EXPECT_TRUE(dispatcher.http_url().empty());
  ClientLoop loop;
  Probe probe{loop, loop.Connect(dispatcher.address())};
  probe.PingOk();
}

TEST(HttpEndpoints, AnHttpAddressOthersCanReachNeedsAToken) {
  TempDir dir;
  Subprocess refused({DispatcherBinary(), "--listen=tcp:127.0.0.1:0", "--http=tcp:0.0.0.0:0",
                      "--work-dir=" + dir.File("work")},
                     dir.File("stderr"));
  auto status = refused.Wait(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2);
  std::ifstream in(dir.File("stderr"));
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(said.find("--http=tcp:0.0.0.0:0"), std::string::npos) << said;
}

}  // namespace
}  // namespace dispatch::testing
