// `dispatcher`: the dispatcher process. Parses flags, then runs one libuv loop
// until SIGINT/SIGTERM ends it gracefully (exit 0). Exit codes: 0 clean stop,
// 1 start-up failure, 2 bad flags, 3 journal write failure (fail-stop),
// 4 an internal invariant broke, 5 HA mode: leadership lost or fenced (with
// --rejoin=false; by default such a member runs itself afresh as a standby).
// With --verify it only checks the work dir: 0 clean, 1 damaged.
#include <errno.h>
#include <kj/debug.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/address.h"
#include "common/flag_parser.h"
#include "common/log.h"
#include "reactor/dispatcher_server.h"
#include "reactor/etcd/endpoints.h"
#include "reactor/exec_self.h"
#include "reactor/ha/ha_controller.h"
#include "reactor/ha/ha_limits.h"
#include "reactor/malloc_tuning.h"
#include "reactor/signals.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "storage/verify.h"

namespace dispatch::reactor {
namespace {

struct MainFlags {
  DispatcherOptions options;
  std::string log_level = "info";
  std::string log_format = "text";
  bool allow_remote_without_token = false;
  bool verify = false;
  // HA mode (docs/high_availability.md): empty --etcd is single node.
  std::string etcd;
  std::string ha_prefix = "/dispatch/default";
  uint64_t lease_ttl_ms = 2000;
  std::string advertise;
  bool rejoin = true;
};

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

void DeclareFlags(FlagParser& parser, MainFlags& flags) {
  DispatcherOptions& o = flags.options;
  parser.AddString("listen", "ADDRESS",
                   "where to accept workers and clients: tcp:HOST:PORT or unix:PATH "
                   "(loopback only unless you name another host; port 0 picks a free port)",
                   &o.listen);
  o.http = kDefaultHttp;
  parser.AddString("http", "ADDRESS",
                   "where operators' HTTP endpoints listen (/metrics, /healthz, /readyz, "
                   "/api/status, the status page /): tcp:HOST:PORT (port 0 picks a free port) or "
                   "unix:PATH; off: no HTTP. With --token, requests need \"Authorization: Bearer "
                   "TOKEN\" (the page / itself excepted)",
                   &o.http);
  parser.AddUint("http-max-connections",
                 "open HTTP connections allowed at once; more are closed on accept and counted",
                 &o.http_max_connections, 1, 100000);
  parser.AddString("work-dir", "DIR", "directory for the SQLite journal and the lock file",
                   &o.work_dir);
  parser.AddBool("verify",
                 "check the stopped dispatcher's --work-dir offline and exit: every journal "
                 "record, the snapshot, every dataset and closure result, SQLite's "
                 "integrity_check and the journal's end against its high-water mark; prints "
                 "what it found, exit 0 clean, 1 damaged (changes nothing; refused while a "
                 "dispatcher runs there)",
                 &flags.verify);
  parser.AddString("etcd", "ENDPOINTS",
                   "HA mode: comma-separated etcd client URLs (http://HOST:PORT,...). The "
                   "dispatcher campaigns for leadership; the leader journals every group commit "
                   "as one etcd transaction and replies after etcd acknowledged it; the others are "
                   "standbys that answer \"not the leader\". Empty (the default): single node, the "
                   "SQLite journal in --work-dir",
                   &flags.etcd);
  parser.AddString("ha-prefix", "PREFIX",
                   "HA mode: the etcd key prefix of this group of dispatchers (PREFIX/leader, "
                   "PREFIX/journal/SEQ); starts with / and does not end with one",
                   &flags.ha_prefix);
  parser.AddUint("lease-ttl-ms",
                 "HA mode: the leader's etcd lease, rounded up to whole seconds (at least 1 s; etcd "
                 "raises one under 1.5 x its election timeout, e.g. 1 s to 2 s at its default "
                 "timing, and the granted TTL is used): a dead leader is replaced about this long "
                 "after it stopped",
                 &flags.lease_ttl_ms, 1000, 3600000);
  parser.AddString("advertise", "ADDRESS",
                   "HA mode: the RPC address clients are sent to while this dispatcher leads "
                   "(standbys name it in their \"not the leader\" errors); empty: the bound "
                   "--listen address",
                   &flags.advertise);
  parser.AddBool("rejoin",
                 "HA mode: after losing leadership (lease lost, fenced), wait 1 s and run this "
                 "binary afresh, same pid and same bound addresses, to rejoin the group as a "
                 "standby; false: exit with code 5 and leave the restart to a supervisor",
                 &flags.rejoin);
  parser.AddString("log-level", "LEVEL", "debug, info, warning or error", &flags.log_level);
  parser.AddString("log-format", "FORMAT",
                   "text: one line per event, \"TIME LEVEL MESSAGE\"; json: one JSON object per "
                   "line with \"time\", \"level\" and \"message\" (for log shippers)",
                   &flags.log_format);
  parser.AddUint("stuck-closure-warning-ms",
                 "closure watchdog: when closures are running and none has finished for this "
                 "long, log one warning per such episode naming what runs, and count it; 0: off",
                 &o.stuck_closure_warning_ms, 0, 7ull * 24 * 3600 * 1000);
  parser.AddCustom("synchronous", "MODE",
                   "full: fsync every group commit (survives power loss); normal: fsync at "
                   "checkpoints only (survives a crash of the process, not of the machine)",
                   "full", [&o](const std::string& v) {
                     if (v == "full") {
                       o.synchronous = storage::Synchronous::kFull;
                     } else if (v == "normal") {
                       o.synchronous = storage::Synchronous::kNormal;
                     } else {
                       return InvalidArgumentError("--synchronous must be full or normal, got '" + v + "'");
                     }
                     return Status::Ok();
                   });
  parser.AddString("token", "TOKEN",
                   "secret a peer must present at the gateway (empty: no check)", &o.token);
  parser.AddBool("allow-remote-without-token",
                 "listen on an address other machines can reach (not loopback, not a Unix socket) "
                 "with an empty --token, so anyone who can connect is admitted; without this flag "
                 "that combination refuses to start (exit 2)",
                 &flags.allow_remote_without_token);
  parser.AddUint("snapshot-every",
                 "start a snapshot every N journaled updates (the snapshot replica writes it on "
                 "the thread pool; the journal before it is then deleted a slice per commit); 0: "
                 "only at clean shutdown",
                 &o.durable.snapshot_every, 0, 1ull << 40);
  parser.AddBool("snapshot-in-background",
                 "true: the snapshot replica encodes and writes each snapshot off the loop, "
                 "replies never wait; "
                 "false: the loop writes it inline, holding every reply (for comparison only)",
                 &o.durable.snapshot_in_background);
  o.durable.sync.inline_sync_max_records = 8;
  parser.AddUint("inline-sync-records",
                 "with --synchronous=full, a group commit of at most N records is fsynced on the "
                 "loop thread (a nearly idle loop has nothing to overlap with it, and the thread "
                 "pool's hand-off costs two thread wake-ups), but not while a snapshot, a "
                 "checkpoint, a snapshot file's unlink or a result file's write runs on the "
                 "thread pool, nor while more than one of the last 128 such small commits' "
                 "fsyncs took over 1 ms; larger commits are fsynced on the thread pool. "
                 "0: always the thread pool",
                 &o.durable.sync.inline_sync_max_records, 0, 1u << 20);
  parser.AddUint("tick-ms", "period of the housekeeping timer in milliseconds", &o.tick_ms, 1,
                 60000);
  parser.AddUint("drain-timeout-ms",
                 "on SIGTERM, how long to wait for in-flight replies before closing", &o.drain_timeout_ms,
                 0, 600000);
  DataServiceOptions& d = o.data;
  parser.AddCustom(
      "fault-tolerant-mode", "BOOL",
      "true: the state (datasets, jobs, tasks, splits, clients) survives a restart. The journal is "
      "written either way: durability is this product's promise, so true is the default. false: a "
      "restart begins from an empty state (ids are never reused) and clients of the previous run get "
      "clear errors, as the reference does without fault tolerance",
      "true", [&d](const std::string& v) {
        if (v == "true" || v == "1") {
          d.fault_tolerant_mode = true;
        } else if (v == "false" || v == "0") {
          d.fault_tolerant_mode = false;
        } else {
          return InvalidArgumentError("--fault-tolerant-mode must be true or false, got '" + v + "'");
        }
        return Status::Ok();
      });
  parser.AddCustom("worker-addresses", "ADDR,ADDR,...",
                   "fixed list of worker addresses for static sharding (FILE, DATA, FILE_OR_DATA, "
                   "HINT): a worker's index is its place in the list, and only listed workers may "
                   "register. Empty: static sharding is refused with an error",
                   "", [&d](const std::string& v) {
                     d.worker_addresses.clear();
                     size_t start = 0;
                     while (start <= v.size() && !v.empty()) {
                       size_t comma = v.find(',', start);
                       std::string item = v.substr(start, comma == std::string::npos ? std::string::npos
                                                                                      : comma - start);
                       if (item.empty()) {
                         return InvalidArgumentError("--worker-addresses has an empty entry in '" + v + "'");
                       }
                       d.worker_addresses.push_back(item);
                       if (comma == std::string::npos) break;
                       start = comma + 1;
                     }
                     return Status::Ok();
                   });
  parser.AddUint("job-gc-check-interval-ms",
                 "how often to look for jobs to garbage-collect (reference default: 10 minutes); 0 turns "
                 "job GC off",
                 &d.job_gc_check_interval_ms, 0, 1ull << 40);
  parser.AddUint("job-gc-timeout-ms",
                 "a job whose last client was released this long ago is garbage-collected (reference "
                 "default: 5 minutes)",
                 &d.job_gc_timeout_ms, 0, 1ull << 40);
  parser.AddUint("client-timeout-ms",
                 "a job client with no heartbeat for this long is released (reference default: 2 "
                 "minutes); 0: never",
                 &d.client_timeout_ms, 0, 1ull << 40);
  parser.AddUint("worker-timeout-ms",
                 "a worker with no heartbeat for this long is removed (ours: 1 minute); a dropped "
                 "connection removes it at once; 0: only on a dropped connection",
                 &d.worker_timeout_ms, 0, 1ull << 40);
  parser.AddUint("worker-heartbeat-interval-ms",
                 "how often workers are asked to heartbeat (told in every heartbeat reply); at "
                 "most half of --worker-timeout-ms. 0 (the default): a quarter of "
                 "--worker-timeout-ms, at most 10 s",
                 &d.worker_heartbeat_interval_ms, 0, 1ull << 32);
  parser.AddUint("max-splits-per-call", "most splits one batched getSplit hands out",
                 &d.max_splits_per_call, 1, 1u << 20);
  parser.AddUint("max-name-bytes",
                 "longest worker address, transfer address, tag or job name accepted",
                 &d.max_name_bytes, 16, 1u << 20);
  ClosureOptions& c = d.closures;
  parser.AddUint("max-queued-closures",
                 "queued closures past which schedule waits (back-pressure; the reference's "
                 "queue size 256Ki)",
                 &c.max_queued_closures, 1, 1ull << 32);
  parser.AddUint("max-closure-attempts",
                 "runs after which a closure whose worker keeps failing is failed, not retried "
                 "(ours: 3; 0: retry forever, as the reference does)",
                 &c.policy.max_closure_attempts, 0, 1u << 20);
  parser.AddUint("closure-transient-retries",
                 "transient errors a closure may report and still be retried (the reference's "
                 "transient failure threshold, 3)",
                 &c.policy.transient_retries, 0, 1u << 20);
  parser.AddUint("closure-start-delay-ms",
                 "staggered start: the i-th worker gets closures after min(i * delay, max), or "
                 "after delay when max is 0 (the reference's schedule start delay; 0: none)",
                 &c.policy.start_delay_ms, 0, 1ull << 32);
  parser.AddUint("closure-start-delay-max-ms", "the cap of the staggered start (0: none)",
                 &c.policy.start_delay_max_ms, 0, 1ull << 32);
  parser.AddUint("closure-commit-hold-us",
                 "push closures before their assignment commits and let the commit wait this "
                 "long for the workers' reports, so both share one fsync (0: push after the "
                 "commit)",
                 &c.commit_hold_us, 0, 1000000);
  parser.AddUint("max-closures-per-call", "most closures one schedule or cancel call may carry",
                 &c.max_closures_per_call, 1, 1u << 20);
  parser.AddUint("max-results-per-call", "most closure outcomes one awaitResults reply carries",
                 &c.max_results_per_call, 1, 1u << 20);
  c.max_result_bytes = 0;  // auto, resolved in Main once --max-message-bytes is known
  parser.AddUint("max-result-bytes",
                 "largest closure result accepted; a larger one fails its closure with an error "
                 "naming this limit (workers learn it in heartbeat replies). At most half of "
                 "--max-message-bytes; 0: 32 MiB or that half, whichever is smaller",
                 &c.max_result_bytes, 0, 1ull << 30);
  parser.AddUint("max-result-bytes-per-call",
                 "result bytes one awaitResults or getOutcomes reply carries (the first outcome "
                 "always goes)",
                 &c.max_result_bytes_per_call, 1, 1ull << 30);
  parser.AddUint("result-file-bytes",
                 "closure results of at least this many bytes are kept in files of their own under "
                 "<work-dir>/results/, written and fsynced on the thread pool before the closure's "
                 "finish is journaled, so storing, fetching and releasing them never holds the "
                 "loop's commit; smaller ones are rows written with the journal's commit. 0: always rows "
                 "(--etcd: always the etcd journal)",
                 &o.durable.result_file_bytes, 0, 1ull << 40);
  parser.AddUint("max-connections", "open connections allowed at once; more are refused",
                 &o.limits.max_connections, 1, 1000000);
  parser.AddUint("max-message-bytes", "largest message a peer may send", &o.limits.max_message_bytes,
                 1024, 1ull << 31);
  parser.AddUint("max-calls-in-flight",
                 "calls one connection may have in flight; crossing it closes the connection",
                 &o.limits.max_calls_in_flight_per_connection, 1, 1000000);
  parser.AddUint("max-outbound-bytes",
                 "replies queued for one connection that is not reading; crossing it closes it",
                 &o.limits.max_outbound_bytes_per_connection, 4096, 1ull << 40);
  parser.AddUint("handshake-timeout-ms", "time a new connection has to authenticate",
                 &o.limits.handshake_timeout_ms, 1, 3600000);
  parser.AddUint("message-timeout-ms",
                 "a message whose first byte arrived must be complete within this long, or its "
                 "connection is closed and counted (checked every --tick-ms)",
                 &o.limits.message_timeout_ms, 1, 3600000);
  parser.AddUint("max-connections-per-address",
                 "open TCP connections from one peer IP address (loopback included); more are "
                 "refused and counted. Unix-socket peers count against --max-connections only",
                 &o.limits.max_connections_per_address, 1, 1000000);
  parser.AddUint("peer-memory-budget-bytes",
                 "bytes held for all peers together: half-received messages and queued replies. "
                 "Past it a message over 64 KiB waits (its peer is not read) until room frees, "
                 "within --message-timeout-ms; one that can never fit is refused. Messages over "
                 "64 KiB may use 7/8 of it, so small calls always find room",
                 &o.limits.peer_memory_budget_bytes, 1ull << 20, 1ull << 44);
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
  Log(LogLevel::kError, "cannot run ", argv[0], " afresh (", strerror(errno), "): exiting with code ",
      kExitLeadershipLost);
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
  // A result travels in one message (a report, a reply) with other reports
  // or outcomes: half of the message limit leaves room for them.
  uint64_t& max_result = flags.options.data.closures.max_result_bytes;
  const uint64_t max_message = flags.options.limits.max_message_bytes;
  ha::HaOptions ha_options;
  if (!flags.etcd.empty()) {
    auto endpoints = etcd::ParseEndpoints(flags.etcd);
    if (!endpoints.ok()) {
      fprintf(stderr, "dispatcher: %s\n", endpoints.status().message().c_str());
      return 2;
    }
    const std::string& prefix = flags.ha_prefix;
    if (prefix.size() < 2 || prefix.front() != '/' || prefix.back() == '/') {
      fprintf(stderr, "dispatcher: --ha-prefix must start with / and not end with one, got '%s'\n",
              prefix.c_str());
      return 2;
    }
    if (!flags.options.data.fault_tolerant_mode) {
      // A reset at start-up is a local snapshot the etcd journal would not see.
      fprintf(stderr, "dispatcher: --etcd needs --fault-tolerant-mode=true: a standby that takes over "
                      "rebuilds the whole state from the etcd journal\n");
      return 2;
    }
    ha_options.endpoints = std::move(endpoints).value();
    ha_options.prefix = prefix;
    ha_options.lease_ttl_ms = flags.lease_ttl_ms;
    ha_options.advertise = flags.advertise;
    flags.options.ha = true;
    if (Status limits = ha::ApplyHaLimits(flags.options); !limits.ok()) {
      fprintf(stderr, "dispatcher: %s\n", limits.message().c_str());
      return 2;
    }
  }
  if (max_result == 0) max_result = std::min<uint64_t>(32ull << 20, max_message / 2);
  if (max_result > max_message / 2) {
    fprintf(stderr,
            "dispatcher: --max-result-bytes=%llu leaves no room in a message of "
            "--max-message-bytes=%llu: it must be at most half of it, %llu\n",
            static_cast<unsigned long long>(max_result),
            static_cast<unsigned long long>(max_message),
            static_cast<unsigned long long>(max_message / 2));
    return 2;
  }
  if (Status heartbeats = CheckHeartbeatInterval(flags.options.data); !heartbeats.ok()) {
    fprintf(stderr, "dispatcher: %s\n", heartbeats.message().c_str());
    return 2;
  }
  if (Result<std::string> address = ToKjAddress(flags.options.listen); !address.ok()) {
    fprintf(stderr, "dispatcher: %s\n", address.status().message().c_str());
    return 2;
  }
  if (flags.options.http != "off") {
    if (Result<std::string> address = ToKjAddress(flags.options.http); !address.ok()) {
      fprintf(stderr, "dispatcher: --http must be tcp:HOST:PORT, unix:PATH or off: %s\n",
              address.status().message().c_str());
      return 2;
    }
  }
  if (flags.options.token.empty() && flags.options.http != "off" &&
      !IsLocalOnlyAddress(flags.options.http) && !flags.allow_remote_without_token) {
    fprintf(stderr,
            "dispatcher: --http=%s can be reached from other machines and --token is empty: "
            "anyone could read the dispatcher's state. Set --token, or pass "
            "--allow-remote-without-token to accept that\n",
            flags.options.http.c_str());
    return 2;
  }
  if (flags.options.token.empty() && !IsLocalOnlyAddress(flags.options.listen)) {
    if (!flags.allow_remote_without_token) {
      fprintf(stderr,
              "dispatcher: --listen=%s can be reached from other machines and --token is empty: "
              "anyone could connect. Set --token, or pass --allow-remote-without-token to accept "
              "that\n",
              flags.options.listen.c_str());
      return 2;
    }
    Log(LogLevel::kWarning, "listening on ", flags.options.listen.c_str(),
        " without a token (--allow-remote-without-token): anyone who can connect is admitted");
  }
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
    {
      DispatcherServer server(io, flags.options);
      // Handlers go in before the address is announced: whoever reads it may
      // signal us at once.
      ShutdownSignals signals(loop.get(), [&server](int signum) {
        server.BeginShutdown(signum == SIGINT ? "SIGINT" : "SIGTERM");
      });
      Result<std::string> bound = server.Start();
      if (!bound.ok()) {
        Log(LogLevel::kError, bound.status().ToString().c_str());
        exit_code = 1;
      } else {
        // The start line on stdout: scripts and tests read the bound address
        // here. With HTTP on, a second line says where the status page is.
        printf("dispatcher listening on %s\n", bound->c_str());
        if (!server.http_url().empty()) printf("dispatcher status page on %s\n", server.http_url().c_str());
        fflush(stdout);
        // HA mode: campaign; the server serves once this wins (or stays a
        // standby naming the leader).
        std::unique_ptr<ha::HaController> ha_controller;
        if (flags.options.ha) {
          if (ha_options.advertise.empty()) ha_options.advertise = *bound;
          // Tests only (tests/etcd): a leader that dies between the chunks
          // of its Nth etcd snapshot and their switch.
          if (const char* n = getenv("DISPATCH_TEST_HA_SNAPSHOT_KILL_BEFORE_SWITCH")) {
            ha_options.test_kill_before_snapshot_switch = strtoull(n, nullptr, 10);
          }
          if (const char* check = getenv("DISPATCH_TEST_HA_CHECK_LIVE_STATE")) {
            ha_options.test_check_live_state = std::string(check) == "1";
          }
          ha_controller = std::make_unique<ha::HaController>(io, server, ha_options);
          ha_controller->Start();
        }
        bound_listen = *bound;
        bound_http = server.http_url();
        io.Run();
        exit_code = server.exit_code();
        // A clean stop hands leadership over at once: the lease is revoked,
        // etcd deletes the leader key, a standby's watch sees it.
        if (ha_controller && exit_code == 0) ha_controller->Resign(kj::SECONDS).wait(io.wait_scope());
        // Nothing of it runs once the loop stopped; the server's journal
        // refers to its etcd journal until the server is destroyed, after
        // this scope, and never uses it meanwhile.
        ha_controller.reset();
      }
    }
    // Events queued while tearing the server down must run before the loop goes.
    io.wait_scope().poll();
  }
  int rc = loop.Close();
  if (rc != 0) Log(LogLevel::kWarning, "libuv loop closed with handles still open: ", uv_strerror(rc));
  if (exit_code == kExitLeadershipLost && flags.rejoin) RejoinAsStandby(argc, argv, bound_listen, bound_http);
  return exit_code;
}

}  // namespace
}  // namespace dispatch::reactor

int main(int argc, char** argv) { return dispatch::reactor::Main(argc, argv); }
