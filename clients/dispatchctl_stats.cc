#include "clients/dispatchctl_stats.h"

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <stdio.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>

#include "clients/dispatcher_connection.h"
#include "clients/dispatchctl_connect.h"
#include "common/rpc_status.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {
namespace {

using Dispatcher = rpc::Dispatcher;

// One reading of the dispatcher's figures: the replies as they came.
struct Snapshot {
  Snapshot(capnp::Response<Dispatcher::GetVersionResults> v,
           capnp::Response<Dispatcher::GetServerStatsResults> s,
           capnp::Response<Dispatcher::GetClosureStatsResults> c,
           capnp::Response<Dispatcher::GetWorkersResults> w,
           capnp::Response<Dispatcher::ListJobsResults> j)
      : version(kj::mv(v)), server(kj::mv(s)), closures(kj::mv(c)), workers(kj::mv(w)), jobs(kj::mv(j)) {}
  capnp::Response<Dispatcher::GetVersionResults> version;
  capnp::Response<Dispatcher::GetServerStatsResults> server;
  capnp::Response<Dispatcher::GetClosureStatsResults> closures;
  capnp::Response<Dispatcher::GetWorkersResults> workers;
  capnp::Response<Dispatcher::ListJobsResults> jobs;
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();

  uint64_t WorkersConnected() const {
    uint64_t n = 0;
    for (auto w : workers.getWorkers()) n += w.getConnected();
    return n;
  }
  uint64_t JobsUnfinished() const {
    uint64_t n = 0;
    for (auto j : jobs.getJobs()) n += !j.getFinished() && !j.getGarbageCollected();
    return n;
  }
};

kj::Promise<kj::Own<Snapshot>> Fetch(Dispatcher::Client dispatcher) {
  // One after the other on one connection: a tool's few calls, no hurry.
  return dispatcher.getVersionRequest().send().then([dispatcher](auto version) mutable {
    return dispatcher.getServerStatsRequest().send().then(
        [dispatcher, version = kj::mv(version)](auto server) mutable {
          return dispatcher.getClosureStatsRequest().send().then(
              [dispatcher, version = kj::mv(version), server = kj::mv(server)](auto closures) mutable {
                return dispatcher.getWorkersRequest().send().then(
                    [dispatcher, version = kj::mv(version), server = kj::mv(server),
                     closures = kj::mv(closures)](auto workers) mutable {
                      return dispatcher.listJobsRequest().send().then(
                          [version = kj::mv(version), server = kj::mv(server),
                           closures = kj::mv(closures), workers = kj::mv(workers)](auto jobs) mutable {
                            return kj::heap<Snapshot>(kj::mv(version), kj::mv(server), kj::mv(closures),
                                                      kj::mv(workers), kj::mv(jobs));
                          });
                    });
              });
        });
  });
}

std::string Duration(uint64_t micros) {
  uint64_t s = micros / 1000000;
  char out[48];
  snprintf(out, sizeof(out), "%lluh%02llum%02llus", static_cast<unsigned long long>(s / 3600),
           static_cast<unsigned long long>(s / 60 % 60), static_cast<unsigned long long>(s % 60));
  return out;
}

std::string Mib(uint64_t bytes) {
  char out[32];
  snprintf(out, sizeof(out), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return out;
}

std::string Rate(uint64_t now, uint64_t before, double seconds) {
  char out[32];
  snprintf(out, sizeof(out), "%.1f/s", seconds > 0 ? static_cast<double>(now - before) / seconds : 0.0);
  return out;
}

std::string N(uint64_t v) { return std::to_string(v); }

// The text of one reading; with `previous`, rates since it.
std::string FormatText(const Snapshot& now, const Snapshot* previous) {
  auto v = now.version.getVersion();
  auto s = now.server.getStats();
  auto c = now.closures.getStats();
  std::string out;
  out += "dispatcher " + std::string(v.getBuild().cStr()) + "  incarnation " + N(v.getIncarnation()) +
         "  up " + Duration(s.getUptimeMicros()) + "\n";
  out += "connections  " + N(s.getConnectionsOpen()) + " open, " + N(s.getConnectionsAccepted()) +
         " accepted   rpc calls " + N(s.getCallsTotal()) + " total, " + N(s.getCallsInFlight()) +
         " in flight\n";
  char lag[64];
  snprintf(lag, sizeof(lag), "%.1f ms", static_cast<double>(s.getMaxTickLatenessMicros()) / 1000);
  out += "loop         " + N(s.getTicks()) + " ticks of " + N(s.getTickIntervalMicros() / 1000) +
         " ms, worst lateness " + lag + "\n";
  out += "peer memory  " + Mib(s.getPeerMemoryUsedBytes()) + " of " + Mib(s.getPeerMemoryLimitBytes()) +
         " (high water " + Mib(s.getPeerMemoryHighWaterBytes()) + ")\n";
  out += "workers      " + N(now.workers.getWorkers().size()) + " (" + N(now.WorkersConnected()) +
         " connected)\n";
  out += "jobs         " + N(now.jobs.getJobs().size()) + " (" + N(now.JobsUnfinished()) +
         " unfinished, " + N(s.getJobsWithoutWorker()) + " without a worker)\n";
  out += "closures     waiting " + N(c.getWaiting()) + ", queued " + N(c.getQueued()) + " (" +
         N(c.getQueuedWithoutWorker()) + " without a worker), assigned " + N(c.getAssigned()) +
         ", finished " + N(c.getFinished()) + ", failed " + N(c.getFailed()) + ", cancelled " +
         N(c.getCancelled()) + "\n";
  out += "since start  scheduled " + N(c.getScheduledTotal()) + ", results accepted " +
         N(c.getResultsAccepted()) + ", put back " + N(c.getPutBack()) + ", transient retries " +
         N(c.getTransientRetries()) + ", attempts exhausted " + N(c.getAttemptsExhausted()) +
         ", deadlines exceeded " + N(c.getDeadlinesExceeded()) + "\n";
  out += "stuck        " + N(c.getStuckClosures()) + " closures now, " + N(c.getStuckEpisodes()) +
         " episodes (--stuck-closure-warning-ms)\n";
  if (previous != nullptr) {
    const double seconds = std::chrono::duration<double>(now.at - previous->at).count();
    auto ps = previous->server.getStats();
    auto pc = previous->closures.getStats();
    const bool same = previous->version.getVersion().getIncarnation() == v.getIncarnation();
    out += "rates        ";
    if (same) {
      out += "closures finished " + Rate(c.getResultsAccepted(), pc.getResultsAccepted(), seconds) +
             ", scheduled " + Rate(c.getScheduledTotal(), pc.getScheduledTotal(), seconds) +
             ", rpc calls " + Rate(s.getCallsTotal(), ps.getCallsTotal(), seconds) + "\n";
    } else {
      out += "(the dispatcher restarted: counters began again)\n";
    }
  }
  return out;
}

// The reading as one JSON document: the replies' structs under their names.
std::string FormatJson(const Snapshot& now, bool pretty) {
  capnp::JsonCodec codec;
  codec.setPrettyPrint(pretty);
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<capnp::JsonValue>();
  auto fields = root.initObject(5);
  fields[0].setName("version");
  codec.encode(now.version.getVersion(), fields[0].initValue());
  fields[1].setName("server");
  codec.encode(now.server.getStats(), fields[1].initValue());
  fields[2].setName("closures");
  codec.encode(now.closures.getStats(), fields[2].initValue());
  auto count_pair = [](capnp::JsonValue::Builder value, const char* a, uint64_t av, const char* b,
                       uint64_t bv) {
    auto object = value.initObject(2);
    object[0].setName(a);
    object[0].initValue().setNumber(static_cast<double>(av));
    object[1].setName(b);
    object[1].initValue().setNumber(static_cast<double>(bv));
  };
  fields[3].setName("workers");
  count_pair(fields[3].initValue(), "total", now.workers.getWorkers().size(), "connected",
             now.WorkersConnected());
  fields[4].setName("jobs");
  count_pair(fields[4].initValue(), "total", now.jobs.getJobs().size(), "unfinished", now.JobsUnfinished());
  return std::string(codec.encodeRaw(root.asReader()).cStr()) + "\n";
}

}  // namespace

void DeclareTopFlags(FlagParser& parser, TopFlags& flags) {
  parser.AddUint("interval", "top: seconds between two refreshes", &flags.interval_s, 1, 3600);
  parser.AddUint("iterations", "top: stop after this many refreshes (0: until Ctrl-C)", &flags.iterations,
                 0, 1ull << 32);
}

std::string CheckStatsArgs(const std::vector<std::string>& args) {
  return args.size() == 1 ? "" : "'" + args[0] + "' takes no argument";
}

int RunStats(const std::string& dispatcher, const std::string& token,
             const std::vector<std::string>& args, const TopFlags& flags, bool json,
             uint64_t timeout_ms) {
  const bool top = args[0] == "top";
  const bool clear = top && !json && isatty(STDOUT_FILENO);
  return RunCommandOnLoop([&](uvkj::UvAsyncIo& io) {
    auto connection = io.timer()
                          .timeoutAfter(timeout_ms * kj::MILLISECONDS,
                                        ConnectForCommand(io.network(), dispatcher, token))
                          .wait(io.wait_scope());
    kj::Own<Snapshot> previous;
    for (uint64_t n = 1;; ++n) {
      kj::Own<Snapshot> now = io.timer()
                                  .timeoutAfter(timeout_ms * kj::MILLISECONDS, Fetch(connection->dispatcher()))
                                  .wait(io.wait_scope());
      std::string text = json ? FormatJson(*now, /*pretty=*/!top) : FormatText(*now, previous.get());
      if (clear) text = "\x1b[H\x1b[2J" + text;
      fputs(text.c_str(), stdout);
      if (top && !json) fputs("\n", stdout);
      fflush(stdout);
      if (!top || (flags.iterations != 0 && n >= flags.iterations)) break;
      previous = kj::mv(now);
      io.timer().afterDelay(flags.interval_s * kj::SECONDS).wait(io.wait_scope());
    }
  });
}

}  // namespace dispatch::clients
