// The dispatcher binary as a user runs it: reachable over TCP and a Unix
// socket, announcing its incarnation, refusing bad flags, and leaving with
// exit code 0 on SIGTERM / SIGINT.
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

rpc::Version::Reader GetVersion(ClientLoop& loop, clients::DispatcherConnection& conn,
                                kj::Own<capnp::Response<rpc::Dispatcher::GetVersionResults>>& keep) {
  keep = kj::heap(loop.Wait(conn.dispatcher().getVersionRequest().send()));
  return keep->getVersion();
}

TEST(DispatcherProcess, AnswersGetVersionOverTcp) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  auto conn = loop.Connect(dispatcher.address());
  kj::Own<capnp::Response<rpc::Dispatcher::GetVersionResults>> response;
  auto version = GetVersion(loop, *conn, response);
  EXPECT_EQ(version.getProtocol(), 1u);
  EXPECT_NE(version.getIncarnation(), 0u);
  EXPECT_FALSE(version.getBuild().size() == 0);
}

TEST(DispatcherProcess, AnswersGetVersionOverUnixSocket) {
  TempDir dir;
  DispatcherProcess dispatcher({.listen = "unix:" + dir.File("d.sock")});
  EXPECT_EQ(dispatcher.address(), "unix:" + dir.File("d.sock"));
  ClientLoop loop;
  auto conn = loop.Connect(dispatcher.address());
  kj::Own<capnp::Response<rpc::Dispatcher::GetVersionResults>> response;
  EXPECT_EQ(GetVersion(loop, *conn, response).getProtocol(), 1u);
}

TEST(DispatcherProcess, RestartOnTheSameWorkDirHasANewIncarnation) {
  TempDir dir;
  uint64_t first;
  {
    DispatcherProcess dispatcher({.work_dir = dir.File("work")});
    ClientLoop loop;
    auto conn = loop.Connect(dispatcher.address());
    kj::Own<capnp::Response<rpc::Dispatcher::GetVersionResults>> response;
    first = GetVersion(loop, *conn, response).getIncarnation();
    auto status = dispatcher.Terminate();
    ASSERT_TRUE(status.has_value());
  }
  DispatcherProcess again({.work_dir = dir.File("work")});
  ClientLoop loop;
  auto conn = loop.Connect(again.address());
  kj::Own<capnp::Response<rpc::Dispatcher::GetVersionResults>> response;
  EXPECT_NE(GetVersion(loop, *conn, response).getIncarnation(), first);
}

void ExpectCleanExitOn(int signum) {
  DispatcherProcess dispatcher;
  ClientLoop loop;
  auto conn = loop.Connect(dispatcher.address());
  // Calls in flight when the signal arrives still get their replies or a
  // disconnect, never a hang; the process itself must leave with 0.
  for (int i = 0; i < 100; ++i) {
    auto request = conn->dispatcher().pingRequest();
    request.setPayload(kj::heapArray<kj::byte>(64));
    loop.Wait(request.send());
  }
  dispatcher.process().Signal(signum);
  auto status = dispatcher.process().Wait(10s);
  ASSERT_TRUE(status.has_value()) << "dispatcher still running 10 s after signal " << signum;
  ASSERT_TRUE(WIFEXITED(*status)) << "dispatcher died of signal " << WTERMSIG(*status);
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  // And the connection we held sees the end.
  loop.Wait(conn->OnDisconnect());
}

TEST(DispatcherProcess, SigtermExitsZero) { ExpectCleanExitOn(SIGTERM); }
TEST(DispatcherProcess, SigintExitsZero) { ExpectCleanExitOn(SIGINT); }

TEST(DispatcherProcess, SigtermRemovesItsUnixSocket) {
  TempDir dir;
  std::string path = dir.File("d.sock");
  DispatcherProcess dispatcher({.listen = "unix:" + path});
  ASSERT_EQ(access(path.c_str(), F_OK), 0);
  auto status = dispatcher.Terminate();
  ASSERT_TRUE(status.has_value() && WIFEXITED(*status));
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

int RunToExit(std::vector<std::string> argv, std::string* out) {
  argv.insert(argv.begin(), DispatcherBinary());
  Subprocess process(argv);
  while (auto line = process.ReadLine(10s)) *out += *line + "\n";
  auto status = process.Wait(10s);
  EXPECT_TRUE(status.has_value());
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

TEST(DispatcherProcess, UnknownFlagExitsTwo) {
  std::string out;
  EXPECT_EQ(RunToExit({"--no-such-flag"}, &out), 2);
}

TEST(DispatcherProcess, MalformedListenAddressExitsTwo) {
  std::string out;
  EXPECT_EQ(RunToExit({"--listen=localhost:80"}, &out), 2);
  EXPECT_EQ(RunToExit({"--listen=tcp:127.0.0.1:notaport"}, &out), 2);
}

TEST(DispatcherProcess, BadLogLevelExitsTwo) {
  std::string out;
  EXPECT_EQ(RunToExit({"--log-level=chatty"}, &out), 2);
}

TEST(DispatcherProcess, HelpDocumentsEveryFlag) {
  std::string out;
  ASSERT_EQ(RunToExit({"--help"}, &out), 0);
  for (const char* flag : {"--listen", "--work-dir", "--log-level", "--token", "--tick-ms",
                           "--drain-timeout-ms", "--max-connections", "--synchronous", "--max-message-bytes",
                           "--max-calls-in-flight", "--max-outbound-bytes",
                           "--handshake-timeout-ms", "--message-timeout-ms", "--max-connections-per-address",
                           "--peer-memory-budget-bytes", "--allow-remote-without-token"}) {
    EXPECT_NE(out.find(flag), std::string::npos) << flag << " missing from --help";
  }
}

TEST(DispatcherProcess, SecondDispatcherOnTheSameWorkDirRefusesToStart) {
  DispatcherProcess first;
  std::vector<std::string> argv = {DispatcherBinary(), "--listen=tcp:127.0.0.1:0",
                                   "--http=tcp:127.0.0.1:0", "--work-dir=" + first.work_dir()};
  Subprocess second(argv);
  auto status = second.Wait(10s);
  ASSERT_TRUE(status.has_value()) << "a second dispatcher started on a locked work dir";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1);
  // The first one is unharmed.
  ClientLoop loop;
  auto conn = loop.Connect(first.address());
  kj::Own<capnp::Response<rpc::Dispatcher::GetVersionResults>> response;
  EXPECT_EQ(GetVersion(loop, *conn, response).getProtocol(), 1u);
}

TEST(DispatcherProcess, WorkDirHoldsTheSqliteJournal) {
  DispatcherProcess dispatcher;
  EXPECT_EQ(access((dispatcher.work_dir() + "/dispatch.db").c_str(), F_OK), 0);
  auto status = dispatcher.Terminate();
  ASSERT_TRUE(status.has_value() && WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  // A clean stop releases the lock: the same work dir starts again.
  DispatcherProcess again({.work_dir = dispatcher.work_dir()});
  EXPECT_FALSE(again.address().empty());
}

TEST(DispatcherProcess, PortInUseFailsWithExitOne) {
  DispatcherProcess first;
  std::string out;
  EXPECT_EQ(RunToExit({"--listen=" + first.address(), "--work-dir=" + first.work_dir() + "-2"}, &out), 1);
}

// The malloc tunables a dispatcher started in the current environment runs
// with, as it logs them at debug level once it runs (re-executed or not).
std::string MallocTunablesOfADispatcher() {
  TempDir dir;
  const std::string log = dir.File("stderr");
  {
    DispatcherProcess dispatcher({.extra_flags = {"--log-level=debug"}, .stderr_path = log});
    EXPECT_TRUE(dispatcher.Terminate().has_value());
  }
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string label = "malloc tunables: ";
  const size_t at = text.find(label);
  if (at == std::string::npos) return "<not logged>";
  return text.substr(at + label.size(), text.find('\n', at) - at - label.size());
}

// Sets an environment variable for one test's children, and puts it back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    if (old != nullptr) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DispatcherProcess, RunsWithTheMallocTunablesItSetsForItself) {
  ScopedEnv no_tunables("GLIBC_TUNABLES", "");
  EXPECT_EQ(MallocTunablesOfADispatcher(), "glibc.malloc.tcache_count=4096:glibc.malloc.hugetlb=1");
}

// Re-executed for its malloc setting, it still goes by its binary's name:
// operators find it with ps, pkill or /proc/PID/comm.
TEST(DispatcherProcess, KeepsItsNameWhenItReexecutesItself) {
  ScopedEnv no_tunables("GLIBC_TUNABLES", "");
  DispatcherProcess dispatcher;
  std::ifstream comm("/proc/" + std::to_string(dispatcher.process().pid()) + "/comm");
  std::string name;
  std::getline(comm, name);
  EXPECT_EQ(name, "dispatcher");
  EXPECT_EQ(MallocTunablesOfADispatcher(), "glibc.malloc.tcache_count=4096:glibc.malloc.hugetlb=1")
      << "the re-execution is what this test is about";
}

TEST(DispatcherProcess, KeepsTheOperatorsMallocTunables) {
  {
    ScopedEnv other("GLIBC_TUNABLES", "glibc.malloc.mxfast=64");
    EXPECT_EQ(MallocTunablesOfADispatcher(),
              "glibc.malloc.mxfast=64:glibc.malloc.tcache_count=4096:glibc.malloc.hugetlb=1");
  }
  {
    // Each tunable the operator set is kept; only the missing one is added.
    ScopedEnv own("GLIBC_TUNABLES", "glibc.malloc.tcache_count=16");
    EXPECT_EQ(MallocTunablesOfADispatcher(), "glibc.malloc.tcache_count=16:glibc.malloc.hugetlb=1");
  }
  {
    ScopedEnv own("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0:glibc.malloc.tcache_count=16");
    EXPECT_EQ(MallocTunablesOfADispatcher(), "glibc.malloc.hugetlb=0:glibc.malloc.tcache_count=16");
  }
  {
    ScopedEnv unset_after("GLIBC_TUNABLES", "");
    unsetenv("GLIBC_TUNABLES");
    ScopedEnv off("DISPATCH_MALLOC_TUNING", "off");
    EXPECT_EQ(MallocTunablesOfADispatcher(), "(none)");
  }
}

// What a dispatcher logged while answering one unknown job id, at `level`.
std::string LogOfAnUnknownJobLookup(const std::string& level) {
  TempDir dir;
  const std::string log = dir.File("stderr");
  std::string description;
  {
    DispatcherProcess dispatcher({.extra_flags = {"--log-level=" + level}, .stderr_path = log});
    ClientLoop loop;
    auto conn = loop.Connect(dispatcher.address());
    auto request = conn->dispatcher().getJobRequest();
    request.setJobId(424242);
    try {
      loop.Wait(request.send());
    } catch (const kj::Exception& e) {
      description = e.getDescription().cStr();
    }
    EXPECT_NE(description.find("NotFound"), std::string::npos) << description;
    EXPECT_TRUE(dispatcher.Terminate().has_value());
  }
  std::ifstream in(log);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(DispatcherProcess, AnExpectedErrorIsLoggedOnlyAtDebugAndNeverWithAStack) {
  const std::string info = LogOfAnUnknownJobLookup("info");
  EXPECT_EQ(info.find("424242"), std::string::npos) << info;
  EXPECT_EQ(info.find("stack:"), std::string::npos) << info;
  const std::string debug = LogOfAnUnknownJobLookup("debug");
  EXPECT_NE(debug.find("NotFound: job 424242"), std::string::npos) << debug;
  EXPECT_EQ(debug.find("stack:"), std::string::npos) << debug;
}

}  // namespace
}  // namespace dispatch::testing
