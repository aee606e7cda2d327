// `dispatchctl`: looks at a running dispatcher. Lists workers, datasets, jobs,
// tasks and job clients, or shows one job, as an aligned table or (--json) as
// the reply struct in capnp's JSON encoding; `read` reads a dataset through
// the service (dispatchctl_read.h); `stats` and `top` show the dispatcher's
// figures (dispatchctl_stats.h); `group` shows an HA group from etcd
// (dispatchctl_group.h); `backup` copies the dispatcher's work dir while it
// serves (dispatchctl_backup.h); `cancel` cancels every closure of a
// coordinator that is not done. Exit codes: 0 ok, 1 the
// dispatcher refused or could not be reached (its message on stderr), 2 usage.
#include <capnp/compat/json.h>
#include <kj/debug.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "clients/dispatchctl_backup.h"
#include "clients/dispatchctl_connect.h"
#include "clients/dispatchctl_group.h"
#include "clients/dispatchctl_read.h"
#include "clients/dispatchctl_run.h"
#include "clients/dispatchctl_stats.h"
#include "clients/dispatcher_connection.h"
#include "clients/listing_format.h"
#include "common/flag_parser.h"
#include "common/log.h"
#include "common/rpc_status.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"

namespace dispatch::clients {
namespace {

constexpr const char* kCommands =
    "workers | datasets | jobs | tasks | clients | job ID | read KIND [ARGS...] | run FUNCTION "
    "[ARGS] | stats | top | group | backup --to=DIR | cancel COORDINATOR_ID";

struct Flags {
  std::string dispatcher;
  std::string token;
  bool json = false;
  uint64_t timeout_ms = 10000;
};

template <typename Reader>
std::string Json(Reader reader) {
  capnp::JsonCodec codec;
  codec.setPrettyPrint(true);
  return std::string(codec.encode(reader).cStr()) + "\n";
}

// Runs one command on `dispatcher`; returns what to print.
kj::Promise<std::string> RunCommand(rpc::Dispatcher::Client dispatcher,
                                    const std::vector<std::string>& args, bool json) {
  const std::string& command = args[0];
  if (command == "workers") {
    return dispatcher.getWorkersRequest().send().then(
        [json](capnp::Response<rpc::Dispatcher::GetWorkersResults> r) {
          return json ? Json(rpc::Dispatcher::GetWorkersResults::Reader(r))
                      : FormatWorkers(r.getWorkers());
        });
  }
  if (command == "datasets") {
    return dispatcher.listDatasetsRequest().send().then(
        [json](capnp::Response<rpc::Dispatcher::ListDatasetsResults> r) {
          return json ? Json(rpc::Dispatcher::ListDatasetsResults::Reader(r))
                      : FormatDatasets(r.getDatasets());
        });
  }
  if (command == "jobs") {
    return dispatcher.listJobsRequest().send().then(
        [json](capnp::Response<rpc::Dispatcher::ListJobsResults> r) {
          return json ? Json(rpc::Dispatcher::ListJobsResults::Reader(r)) : FormatJobs(r.getJobs());
        });
  }
  if (command == "tasks") {
    return dispatcher.listTasksRequest().send().then(
        [json](capnp::Response<rpc::Dispatcher::ListTasksResults> r) {
          return json ? Json(rpc::Dispatcher::ListTasksResults::Reader(r))
                      : FormatTasks(r.getTasks());
        });
  }
  if (command == "clients") {
    return dispatcher.listJobClientsRequest().send().then(
        [json](capnp::Response<rpc::Dispatcher::ListJobClientsResults> r) {
          return json ? Json(rpc::Dispatcher::ListJobClientsResults::Reader(r))
                      : FormatClients(r.getClients());
        });
  }
  if (command == "cancel") {
    auto request = dispatcher.cancelCoordinatorRequest();
    const uint64_t coordinator_id = strtoull(args[1].c_str(), nullptr, 10);
    request.setCoordinatorId(coordinator_id);
    return request.send().then(
        [json, coordinator_id](capnp::Response<rpc::Dispatcher::CancelCoordinatorResults> r) {
          return json ? Json(rpc::Dispatcher::CancelCoordinatorResults::Reader(r))
                      : "cancelled " + std::to_string(r.getCancelled()) +
                            " closures of coordinator " + std::to_string(coordinator_id) + "\n";
        });
  }
  KJ_ASSERT(command == "job");
  auto request = dispatcher.getJobRequest();
  request.setJobId(strtoull(args[1].c_str(), nullptr, 10));
  return request.send().then([json](capnp::Response<rpc::Dispatcher::GetJobResults> r) {
    return json ? Json(rpc::Dispatcher::GetJobResults::Reader(r))
                : FormatJob(r.getJob(), r.getTasks(), r.getClients());
  });
}

// Usage errors name the problem; nullptr when the arguments are fine.
std::string CheckArgs(const std::vector<std::string>& args) {
  if (args.empty()) return std::string("no command given; one of: ") + kCommands;
  const std::string& c = args[0];
  bool listing = c == "workers" || c == "datasets" || c == "jobs" || c == "tasks" || c == "clients";
  if (listing) return args.size() == 1 ? "" : "'" + c + "' takes no argument";
  if (c == "read") return "";  // checked by CheckReadArgs
  if (c == "run") return CheckRunArgs(args);
  if (c == "stats" || c == "top") return CheckStatsArgs(args);
  if (c == "group") return "";  // checked by CheckGroupArgs
  if (c == "backup") return "";  // checked by CheckBackupArgs
  if (c != "job" && c != "cancel") return "unknown command '" + c + "'; one of: " + kCommands;
  const char* what = c == "job" ? "job id" : "coordinator id";
  if (args.size() != 2) return "'" + c + "' takes one " + what;
  const std::string& id = args[1];
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos || id.size() > 19) {
    return std::string(what) + " must be a non-negative integer, got '" + id + "'";
  }
  return "";
}

int Main(int argc, char** argv) {
  Flags flags;
  FlagParser parser("dispatchctl",
                    std::string("Looks at a running dispatcher. Commands: ") + kCommands + ".");
  parser.AddString("dispatcher", "ADDRESS",
                   "the dispatcher: tcp:HOST:PORT or unix:PATH, or a comma-separated list of "
                   "them (an HA group: the leader is found) (required but for group)",
                   &flags.dispatcher);
  parser.AddString("token", "TOKEN", "secret presented at the dispatcher's gateway", &flags.token);
  parser.AddBool("json", "print the reply as JSON", &flags.json);
  parser.AddUint("timeout-ms", "give up after this long", &flags.timeout_ms, 1, 3600000);
  ReadFlags read_flags;
  DeclareReadFlags(parser, read_flags);
  RunFlags run_flags;
  DeclareRunFlags(parser, run_flags);
  TopFlags top_flags;
  DeclareTopFlags(parser, top_flags);
  GroupFlags group_flags;
  DeclareGroupFlags(parser, group_flags);
  BackupFlags backup_flags;
  DeclareBackupFlags(parser, backup_flags);
  std::vector<std::string> args;
  ParseFlagsOrExit(parser, argc, argv, &args);
  std::string usage_error = CheckArgs(args);
  const bool group = usage_error.empty() && args[0] == "group";
  if (group) usage_error = CheckGroupArgs(args, group_flags);
  if (usage_error.empty() && !group && flags.dispatcher.empty()) usage_error = "--dispatcher is required";
  if (usage_error.empty() && args[0] == "read") usage_error = CheckReadArgs(args, read_flags);
  if (usage_error.empty() && args[0] == "backup") usage_error = CheckBackupArgs(args, backup_flags);
  if (!usage_error.empty()) {
    fprintf(stderr, "dispatchctl: %s\nrun with --help for usage\n", usage_error.c_str());
    return 2;
  }
  SetLogLevel(LogLevel::kError);
  signal(SIGPIPE, SIG_IGN);
  if (group) return RunGroup(group_flags, flags.timeout_ms);
  if (args[0] == "run") return RunClosures(flags.dispatcher, flags.token, args, run_flags);
  if (args[0] == "stats" || args[0] == "top") {
    return RunStats(flags.dispatcher, flags.token, args, top_flags, flags.json, flags.timeout_ms);
  }
  if (args[0] == "read") {
    return RunRead(flags.dispatcher, flags.token, args, read_flags, flags.timeout_ms);
  }
  if (args[0] == "backup") {
    return RunBackup(flags.dispatcher, flags.token, backup_flags, flags.json, flags.timeout_ms);
  }

  std::string output;
  const int rc = RunCommandOnLoop([&](uvkj::UvAsyncIo& io) {
    auto work = ConnectForCommand(io.network(), flags.dispatcher, flags.token)
                    .then([&](kj::Own<DispatcherConnection> connection) {
                      auto& ref = *connection;
                      return RunCommand(ref.dispatcher(), args, flags.json).attach(kj::mv(connection));
                    });
    output = io.timer().timeoutAfter(flags.timeout_ms * kj::MILLISECONDS, kj::mv(work)).wait(io.wait_scope());
  });
  if (rc == 0) fputs(output.c_str(), stdout);
  return rc;
}

}  // namespace
}  // namespace dispatch::clients

int main(int argc, char** argv) { return dispatch::clients::Main(argc, argv); }
