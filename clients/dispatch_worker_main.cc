// `dispatch-worker`: the reference worker, built on WorkerAgent. It registers
// with the dispatcher, produces the elements of the tasks it is given (dataset
// kinds range, lines and synthetic), serves them to consumers at its transfer
// address and reports each task complete, and runs closures of its built-in
// functions (clients/builtin_functions.h) on --max-closures slots, until
// SIGINT/SIGTERM. Stdout carries a start line ("dispatch-worker ADDRESS
// started", once it listens; ADDRESS is the bound one when --address asked
// for port 0) and one line per registration ("dispatch-worker registered as
// worker N ...") for scripts and tests. Exit codes: 0 clean stop, 1 start-up
// failure, 2 bad flags.
#include <signal.h>
#include <stdio.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <sstream>

#include "clients/builtin_dataset_kinds.h"
#include "clients/builtin_functions.h"
#include "clients/large_buffers.h"
#include "clients/worker_assembly.h"
#include "common/address.h"
#include "common/flag_parser.h"
#include "common/log.h"

namespace dispatch::clients {
namespace {

struct Flags {
  WorkerAgentOptions agent;
  std::string log_level = "info";
  bool hold_tasks = false;
  ProducerLimits producer;
  uint32_t buffer_mib = 64;
  TransferServerOptions transfer;
};

Status ParseUint32(const std::string& name, const std::string& value, uint32_t min, uint32_t max,
                   uint32_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < min || v > max) {
    return InvalidArgumentError("--" + name + " must be an integer in [" + std::to_string(min) +
                                ", " + std::to_string(max) + "], got '" + value + "'");
  }
  *out = static_cast<uint32_t>(v);
  return Status::Ok();
}

void DeclareFlags(FlagParser& parser, Flags& flags) {
  WorkerAgentOptions& o = flags.agent;
  parser.AddString("dispatcher", "ADDRESS",
                   "the dispatcher: tcp:HOST:PORT or unix:PATH, or a comma-separated list of "
                   "them (an HA group: the leader is found) (required)",
                   &o.dispatcher_address);
  parser.AddString("address", "ADDRESS",
                   "this worker's address, its identity across reconnects (required); "
                   "port 0 (tcp:HOST:0) listens on a free port and registers as the "
                   "address bound, which the start line prints",
                   &o.worker_address);
  parser.AddString("transfer-address", "ADDRESS",
                   "where consumers read this worker's elements (default: --address)",
                   &o.transfer_address);
  parser.AddCustom("tags", "TAG,TAG", "comma-separated worker tags", "",
                   [&o](const std::string& v) {
                     o.tags.clear();
                     std::stringstream in(v);
                     std::string tag;
                     while (std::getline(in, tag, ',')) {
                       if (!tag.empty()) o.tags.push_back(tag);
                     }
                     return Status::Ok();
                   });
  parser.AddString("token", "TOKEN", "secret presented at the dispatcher's gateway", &o.token);
  auto add_u32 = [&parser](const char* name, const char* help, uint32_t* target, uint32_t min,
                           uint32_t max) {
    std::string n = name;
    parser.AddCustom(n, "N", help, std::to_string(*target),
                     [n, target, min, max](const std::string& v) {
                       return ParseUint32(n, v, min, max, target);
                     });
  };
  add_u32("heartbeat-ms", "heartbeat interval in milliseconds (the dispatcher may ask for less)",
          &o.heartbeat_interval_ms, 1, 3600000);
  add_u32("heartbeat-timeout-ms",
          "drop the connection when a heartbeat is unanswered this long "
          "(0: max(10 intervals, 10 s))",
          &o.heartbeat_timeout_ms, 0, 3600000);
  add_u32("connect-timeout-ms", "give up one connection attempt after this long",
          &o.connect_timeout_ms, 1, 3600000);
  add_u32("backoff-initial-ms", "first reconnect delay (jittered)", &o.backoff_initial_ms, 1,
          3600000);
  add_u32("backoff-max-ms", "longest reconnect delay", &o.backoff_max_ms, 1, 3600000);
  add_u32("split-batch", "splits asked for per getSplit call", &o.split_batch, 1, 65536);
  add_u32("max-closures",
          "closure slots: closures run at once, each on its own executor thread "
          "(0: run no closures)",
          &o.max_closures, 0, 1024);
  parser.AddUint("seed", "seed for reconnect jitter and the worker incarnation (0: random)",
                 &o.seed);
  parser.AddBool("hold-tasks",
                 "produce nothing: read a task's splits, then keep it running until the "
                 "dispatcher deletes it",
                 &flags.hold_tasks);
  add_u32("buffer-mib", "elements buffered per task, in MiB", &flags.buffer_mib, 1, 65536);
  add_u32("consumer-hold-ms",
          "how long a consumer whose transfer connection closed keeps its unacknowledged "
          "reply for its return on a new connection; then its elements go to other "
          "consumers (0: at once)",
          &flags.producer.consumer_hold_ms, 0, 3600000);
  add_u32("max-transfer-connections",
          "consumer connections the transfer server keeps open at once; more are closed",
          &flags.transfer.max_connections, 1, 1 << 20);
  parser.AddString("log-level", "LEVEL", "debug, info, warning or error", &flags.log_level);
}

int Main(int argc, char** argv) {
  KeepLargeAllocationsInHeap();
  Flags flags;
  flags.agent.max_closures = 1;
  FlagParser parser("dispatch-worker",
                    std::string("The reference dispatch worker: registers with the dispatcher, "
                                "produces and serves the elements of its tasks (dataset kinds "
                                "range, lines, synthetic), reports them complete, and runs "
                                "closures.\n\n") +
                        kBuiltinFunctionsHelp);
  DeclareFlags(parser, flags);
  ParseFlagsOrExit(parser, argc, argv);
  auto level = ParseLogLevel(flags.log_level);
  if (!level) {
    fprintf(stderr,
            "dispatch-worker: --log-level must be debug, info, warning or error, got '%s'\n",
            flags.log_level.c_str());
    return 2;
  }
  SetLogLevel(*level);
  if (flags.agent.dispatcher_address.empty() || flags.agent.worker_address.empty()) {
    fprintf(stderr,
            "dispatch-worker: --dispatcher and --address are required\n"
            "run with --help to list the flags\n");
    return 2;
  }
  Status valid = ValidateWorkerAgentOptions(flags.agent);
  if (!valid.ok()) {
    fprintf(stderr, "dispatch-worker: %s\n", valid.message().c_str());
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  // Blocked before the agent thread exists, so only sigwait() below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A process that takes over a dead worker's address continues its tasks'
  // split streams above the dead process's sequence numbers.
  flags.agent.first_split_sequence =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  DatasetKindRegistry kinds;
  Status kinds_registered = RegisterBuiltinDatasetKinds(kinds);
  if (!kinds_registered.ok()) {
    Log(LogLevel::kError, "dispatch-worker: ", kinds_registered.ToString().c_str());
    return 1;
  }
  flags.producer.max_buffered_bytes = uint64_t{flags.buffer_mib} << 20;
  WorkerAssemblyOptions assembly_options{.agent = flags.agent,
                                         .producer = flags.producer,
                                         .transfer = flags.transfer,
                                         .hold_tasks = flags.hold_tasks};
  Result<std::unique_ptr<WorkerAssembly>> created =
      WorkerAssembly::Create(std::move(assembly_options), std::move(kinds));
  if (!created.ok()) {
    if (created.status().code() == StatusCode::kInvalidArgument) {
      fprintf(stderr, "dispatch-worker: %s\n", created.status().message().c_str());
      return 2;
    }
    Log(LogLevel::kError, "dispatch-worker: ", created.status().ToString().c_str());
    return 1;
  }
  WorkerAssembly& worker = **created;
  WorkerAgent& agent = worker.agent();
  uint64_t printed_registrations = 0;
  // The "started" line comes first on stdout (scripts wait for it); a
  // registration that happens before it is held back until it is out.
  std::mutex stdout_mu;
  bool started_printed = false;  // guarded by stdout_mu
  std::string held_lines;        // guarded by stdout_mu
  agent.SetStatusListener([&](const WorkerAgentStatus& s) {
    // Agent thread only: no lock needed for printed_registrations.
    if (s.registrations == printed_registrations) return;
    printed_registrations = s.registrations;
    char line[160];
    snprintf(line, sizeof(line),
             "dispatch-worker registered as worker %llu (dispatcher incarnation %llu)\n",
             static_cast<unsigned long long>(s.worker_id),
             static_cast<unsigned long long>(s.dispatcher_incarnation));
    std::lock_guard<std::mutex> lock(stdout_mu);
    if (!started_printed) {
      held_lines += line;
      return;
    }
    fputs(line, stdout);
    fflush(stdout);
  });
  Status registered = RegisterBuiltinFunctions(agent);
  if (!registered.ok()) {
    Log(LogLevel::kError, "dispatch-worker: ", registered.ToString().c_str());
    return 1;
  }
  Status started = worker.Start(std::chrono::seconds(30));
  if (!started.ok()) {
    Log(LogLevel::kError, "dispatch-worker: ", started.ToString().c_str());
    return 1;
  }
  {
    std::lock_guard<std::mutex> lock(stdout_mu);
    std::string transfer_note = worker.transfer_address().empty()
                                    ? ""
                                    : ", transfer address " + worker.transfer_address();
    printf("dispatch-worker %s started%s\n%s", worker.worker_address().c_str(),
           transfer_note.c_str(), held_lines.c_str());
    fflush(stdout);
    started_printed = true;
  }
  int signum = 0;
  sigwait(&stop_signals, &signum);
  Log(LogLevel::kInfo, "dispatch-worker: ", signum == SIGINT ? "SIGINT" : "SIGTERM", ", stopping");
  worker.Stop();
  return 0;
}

}  // namespace
}  // namespace dispatch::clients

int main(int argc, char** argv) { return dispatch::clients::Main(argc, argv); }
