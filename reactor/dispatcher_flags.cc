#include "reactor/dispatcher_flags.h"

#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <string>

#include "common/address.h"
#include "common/log.h"
#include "reactor/etcd/endpoints.h"
#include "reactor/ha/ha_limits.h"

namespace dispatch::reactor {

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
  parser.AddUint(
      "lease-ttl-ms",
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
  parser.AddCustom(
      "synchronous", "MODE",
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
  parser.AddString("token", "TOKEN", "secret a peer must present at the gateway (empty: no check)",
                   &o.token);
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
  parser.AddUint("backup-pages-per-step",
                 "dispatchctl backup copies the database this many pages (of 4 KiB) per turn "
                 "of the loop; a larger step holds the loop longer",
                 &o.durable.backup.pages_per_step, 1, 1u << 20);
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
                 "on SIGTERM, how long to wait for in-flight replies before closing",
                 &o.drain_timeout_ms, 0, 600000);
  DataServiceOptions& d = o.data;
  parser.AddCustom(
      "fault-tolerant-mode", "BOOL",
      "true: the state (datasets, jobs, tasks, splits, clients) survives a restart. The journal is "
      "written either way: durability is this product's promise, so true is the default. false: a "
      "restart begins from an empty state (ids are never reused) and clients of the previous run "
      "get "
      "clear errors, as the reference does without fault tolerance",
      "true", [&d](const std::string& v) {
        if (v == "true" || v == "1") {
          d.fault_tolerant_mode = true;
        } else if (v == "false" || v == "0") {
          d.fault_tolerant_mode = false;
        } else {
          return InvalidArgumentError("--fault-tolerant-mode must be true or false, got '" + v +
                                      "'");
        }
        return Status::Ok();
      });
  parser.AddCustom(
      "worker-addresses", "ADDR,ADDR,...",
      "fixed list of worker addresses for static sharding (FILE, DATA, FILE_OR_DATA, "
      "HINT): a worker's index is its place in the list, and only listed workers may "
      "register. Empty: static sharding is refused with an error",
      "", [&d](const std::string& v) {
        d.worker_addresses.clear();
        size_t start = 0;
        while (start <= v.size() && !v.empty()) {
          size_t comma = v.find(',', start);
          std::string item =
              v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
          if (item.empty()) {
            return InvalidArgumentError("--worker-addresses has an empty entry in '" + v + "'");
          }
          d.worker_addresses.push_back(item);
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
        return Status::Ok();
      });
  parser.AddUint(
      "job-gc-check-interval-ms",
      "how often to look for jobs to garbage-collect (reference default: 10 minutes); 0 turns "
      "job GC off",
      &d.job_gc_check_interval_ms, 0, 1ull << 40);
  parser.AddUint(
      "job-gc-timeout-ms",
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
  parser.AddUint("worker-grace-ms",
                 "how long a removed worker's address keeps its tasks for a worker to come back "
                 "there (ours: 10 s, cut to --worker-timeout-ms when that is set and smaller); past "
                 "it DYNAMIC and OFF tasks are handed over (their splits requeued or their stream "
                 "ended); 0: at once",
                 &d.worker_grace_ms, 0, 1ull << 40);
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
  parser.AddUint(
      "result-file-bytes",
      "closure results of at least this many bytes are kept in files of their own under "
      "<work-dir>/results/, written and fsynced on the thread pool before the closure's "
      "finish is journaled, so storing, fetching and releasing them never holds the "
      "loop's commit; smaller ones are rows written with the journal's commit. 0: always rows "
      "(--etcd: always the etcd journal)",
      &o.durable.result_file_bytes, 0, 1ull << 40);
  parser.AddUint("max-connections", "open connections allowed at once; more are refused",
                 &o.limits.max_connections, 1, 1000000);
  parser.AddUint("max-message-bytes", "largest message a peer may send",
                 &o.limits.max_message_bytes, 1024, 1ull << 31);
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

bool CheckFlags(MainFlags& flags) {
  // A result travels in one message (a report, a reply) with other reports
  // or outcomes: half of the message limit leaves room for them.
  uint64_t& max_result = flags.options.data.closures.max_result_bytes;
  const uint64_t max_message = flags.options.limits.max_message_bytes;
  if (!flags.etcd.empty()) {
    ha::HaOptions& ha_options = flags.ha;
    auto endpoints = etcd::ParseEndpoints(flags.etcd);
    if (!endpoints.ok()) {
      fprintf(stderr, "dispatcher: %s\n", endpoints.status().message().c_str());
      return false;
    }
    const std::string& prefix = flags.ha_prefix;
    if (prefix.size() < 2 || prefix.front() != '/' || prefix.back() == '/') {
      fprintf(stderr, "dispatcher: --ha-prefix must start with / and not end with one, got '%s'\n",
              prefix.c_str());
      return false;
    }
    if (!flags.options.data.fault_tolerant_mode) {
      // A reset at start-up is a local snapshot the etcd journal would not see.
      fprintf(stderr,
              "dispatcher: --etcd needs --fault-tolerant-mode=true: a standby that takes over "
              "rebuilds the whole state from the etcd journal\n");
      return false;
    }
    ha_options.endpoints = std::move(endpoints).value();
    ha_options.prefix = prefix;
    ha_options.lease_ttl_ms = flags.lease_ttl_ms;
    ha_options.advertise = flags.advertise;
    // Tests only (tests/etcd): a leader that dies between the chunks of its
    // Nth etcd snapshot and their switch; a takeover that checks its live
    // state against a replay.
    if (const char* n = getenv("DISPATCH_TEST_HA_SNAPSHOT_KILL_BEFORE_SWITCH")) {
      ha_options.test_kill_before_snapshot_switch = strtoull(n, nullptr, 10);
    }
    if (const char* check = getenv("DISPATCH_TEST_HA_CHECK_LIVE_STATE")) {
      ha_options.test_check_live_state = std::string(check) == "1";
    }
    if (Status limits = ha::ApplyHaLimits(flags.options); !limits.ok()) {
      fprintf(stderr, "dispatcher: %s\n", limits.message().c_str());
      return false;
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
    return false;
  }
  if (Status heartbeats = CheckHeartbeatInterval(flags.options.data); !heartbeats.ok()) {
    fprintf(stderr, "dispatcher: %s\n", heartbeats.message().c_str());
    return false;
  }
  if (Result<std::string> address = ToKjAddress(flags.options.listen); !address.ok()) {
    fprintf(stderr, "dispatcher: %s\n", address.status().message().c_str());
    return false;
  }
  if (flags.options.http != "off") {
    if (Result<std::string> address = ToKjAddress(flags.options.http); !address.ok()) {
      fprintf(stderr, "dispatcher: --http must be tcp:HOST:PORT, unix:PATH or off: %s\n",
              address.status().message().c_str());
      return false;
    }
  }
  if (flags.options.token.empty() && flags.options.http != "off" &&
      !IsLocalOnlyAddress(flags.options.http) && !flags.allow_remote_without_token) {
    fprintf(stderr,
            "dispatcher: --http=%s can be reached from other machines and --token is empty: "
            "anyone could read the dispatcher's state. Set --token, or pass "
            "--allow-remote-without-token to accept that\n",
            flags.options.http.c_str());
    return false;
  }
  if (flags.options.token.empty() && !IsLocalOnlyAddress(flags.options.listen)) {
    if (!flags.allow_remote_without_token) {
      fprintf(stderr,
              "dispatcher: --listen=%s can be reached from other machines and --token is empty: "
              "anyone could connect. Set --token, or pass --allow-remote-without-token to accept "
              "that\n",
              flags.options.listen.c_str());
      return false;
    }
    Log(LogLevel::kWarning, "listening on ", flags.options.listen.c_str(),
        " without a token (--allow-remote-without-token): anyone who can connect is admitted");
  }
  return true;
}

}  // namespace dispatch::reactor
