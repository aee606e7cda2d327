// `dispatcher`: the dispatcher process. Parses flags (dispatcher_flags.h),
// then runs one libuv loop with a single-node DispatcherServer, or with an HA
// member (--etcd: reactor/ha/member.h) that builds one once elected, until
// SIGINT/SIGTERM ends it gracefully (exit 0). Exit codes: 0 clean stop,
// 1 start-up failure, 2 bad flags, 3 journal write failure (fail-stop),
// 4 an internal invariant broke, 5 HA mode: leadership lost or fenced (with
// --rejoin=false; by default such a member runs itself afresh as a standby).
// With --verify it only checks the work dir: 0 clean, 1 damaged.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <memory>
#include <string>
#include <vector>

#include "common/flag_parser.h"
#include "common/log.h"
#include "reactor/dispatcher_flags.h"
#include "reactor/dispatcher_server.h"
#include "reactor/exec_self.h"
#include "reactor/ha/member.h"
#include "reactor/malloc_tuning.h"
#include "reactor/signals.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "storage/verify.h"

namespace dispatch::reactor {
namespace {

// `--verify`: checks the stopped work dir offline (storage/verify.h), prints
// every finding and a summary on stdout, and returns the exit code: 0 clean,
// 1 damaged or not checkable.
int Verify(const std::string& work_dir) {
  auto report = storage::VerifyWorkDir(work_dir);
  if (!report.ok()) {
    printf("cannot verify %s: %s\n", work_dir.c_str(), report.status().ToString().c_str());
    return 1;
  }
  for (const std::string& line : report->damage) printf("damage: %s\n", line.c_str());
  for (const std::string& line : report->notes) printf("note: %s\n", line.c_str());
  printf("%s\n", report->Summary(work_dir).c_str());
  fflush(stdout);
  return report->clean() ? 0 : 1;
}

// The --http flag value that binds `http_url` (DispatcherServer::http_url())
// again: "http://HOST:PORT/" -> "tcp:HOST:PORT", "http+unix:PATH" -> "unix:PATH".
std::string HttpFlagFor(const std::string& http_url) {
  if (http_url.rfind("http+", 0) == 0) return http_url.substr(5);
  std::string host_port = http_url.substr(7);
  if (!host_port.empty() && host_port.back() == '/') host_port.pop_back();
  return "tcp:" + host_port;
}

// --rejoin: this member lost its leadership and its state is no longer the
// group's. Runs the binary afresh with the same flags and the addresses it
// had bound (so clients and the leader key find it where they did, even
// with port 0), after a pause that keeps an unreachable etcd from turning
// this into a busy loop. Returns only if that failed.
void RejoinAsStandby(int argc, char** argv, const std::string& listen, const std::string& http) {
  std::vector<std::string> args(argv, argv + argc);
  const std::string listen_flag = "--listen=" + listen;
  const std::string http_flag = "--http=" + (http.empty() ? std::string("off") : HttpFlagFor(http));
  // A member that rejoined before already ends with these two: no growth.
  if (args.size() < 3 || args[args.size() - 2] != listen_flag || args.back() != http_flag) {
    args.push_back(listen_flag);
    args.push_back(http_flag);
  }
  std::vector<char*> exec_argv;
  for (std::string& arg : args) exec_argv.push_back(arg.data());
  exec_argv.push_back(nullptr);
  Log(LogLevel::kWarning, "rejoining the group as a standby in 1 s: running ", argv[0], " afresh");
  fflush(stdout);
  fflush(stderr);
  const struct timespec pause = {1, 0};
  nanosleep(&pause, nullptr);
  ExecSelf(exec_argv.data());
  Log(LogLevel::kError, "cannot run ", argv[0], " afresh (", strerror(errno),
      "): exiting with code ", kExitLeadershipLost);
}

// Runs `process` (a DispatcherServer or an HaMember) on the loop until it
// stops; its exit code. `bound_listen` and `bound_http`: where it listened.
template <typename Process>
int Run(uvkj::UvAsyncIo& io, Process& process, std::string* bound_listen, std::string* bound_http) {
  // Handlers go in before the address is announced: whoever reads it may
  // signal us at once.
  ShutdownSignals signals(io.loop(), [&process](int signum) {
    process.BeginShutdown(signum == SIGINT ? "SIGINT" : "SIGTERM");
  });
  Result<std::string> bound = process.Start();
  if (!bound.ok()) {
    Log(LogLevel::kError, bound.status().ToString().c_str());
    return 1;
  }
  // The start line on stdout: scripts and tests read the bound address
  // here. With HTTP on, a second line says where the status page is.
  printf("dispatcher listening on %s\n", bound->c_str());
  if (!process.http_url().empty())
    printf("dispatcher status page on %s\n", process.http_url().c_str());
  fflush(stdout);
  *bound_listen = *bound;
  *bound_http = process.http_url();
  io.Run();
  return process.exit_code();
}

int Main(int argc, char** argv) {
  TuneMallocOrReexec(argv);
  KeepFreedMemory();
  MainFlags flags;
  FlagParser parser("dispatcher",
                    "The dispatch dispatcher: one event loop coordinating tf.data-style datasets, "
                    "jobs and splits, and remote closures, for a fleet of workers.");
  DeclareFlags(parser, flags);
  ParseFlagsOrExit(parser, argc, argv);
  auto level = ParseLogLevel(flags.log_level);
  if (!level) {
    fprintf(stderr, "dispatcher: --log-level must be debug, info, warning or error, got '%s'\n",
            flags.log_level.c_str());
    return 2;
  }
  SetLogLevel(*level);
  auto format = ParseLogFormat(flags.log_format);
  if (!format) {
    fprintf(stderr, "dispatcher: --log-format must be text or json, got '%s'\n",
            flags.log_format.c_str());
    return 2;
  }
  SetLogFormat(*format);
  const char* tunables = getenv("GLIBC_TUNABLES");
  Log(LogLevel::kDebug, "malloc tunables: ", tunables == nullptr ? "(none)" : tunables);
  if (flags.verify) return Verify(flags.options.work_dir);
  KjLogRouter kj_log_router;  // errors we return to peers are not ours to log at info
  if (!CheckFlags(flags)) return 2;
  // Sockets are written with MSG_NOSIGNAL; this also covers KJ's own pipes.
  signal(SIGPIPE, SIG_IGN);
  // libuv's pool (4 threads by default) runs the WAL fsync every reply waits
  // for, and beside it a checkpoint, a snapshot, a result file write, a
  // result read and the HTTP serializers: with 4, those could queue the
  // fsync. Read once, at the pool's first use; an operator's value wins.
  setenv("UV_THREADPOOL_SIZE", "8", /*overwrite=*/0);

  uvkj::UvLoop loop;
  int exit_code = 0;
  std::string bound_listen, bound_http;  // for --rejoin
  {
    uvkj::UvAsyncIo io(loop.get());
    if (flags.etcd.empty()) {
      DispatcherServer server(io, flags.options);
      exit_code = Run(io, server, &bound_listen, &bound_http);
    } else {
      ha::HaMember member(io, flags.options, flags.ha);
      exit_code = Run(io, member, &bound_listen, &bound_http);
      // A clean stop hands leadership over at once: the lease is revoked,
      // etcd deletes the leader key, a standby's watch sees it.
      if (exit_code == 0) member.Resign(kj::SECONDS).wait(io.wait_scope());
    }
    // Events queued while tearing the server down must run before the loop goes.
    io.wait_scope().poll();
  }
  int rc = loop.Close();
  if (rc != 0)
    Log(LogLevel::kWarning, "libuv loop closed with handles still open: ", uv_strerror(rc));
  if (exit_code == kExitLeadershipLost && flags.rejoin)
    RejoinAsStandby(argc, argv, bound_listen, bound_http);
  return exit_code;
}

}  // namespace
}  // namespace dispatch::reactor

int main(int argc, char** argv) { return dispatch::reactor::Main(argc, argv); }
