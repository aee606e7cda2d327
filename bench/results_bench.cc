// `dispatch-bench results`: what unfetched closure results cost the
// dispatcher. A real `dispatcher` (--dispatcher-binary: any build, e.g. an
// older one to compare with) and one `dispatch-worker` run --closures
// closures that each return --bytes bytes; nobody fetches them until all are
// finished. Then: the dispatcher's VmRSS while it holds them, the same after a
// kill -9 and recovery (with the recovery time), the time to fetch and release
// them all (each checked byte for byte), and the VmRSS after that. With
// --inputs-per-closure, before the fetch, closures that take the held
// results as inputs (pushed to the worker with their assignments).
// Benchmarks report, never assert.
#include <signal.h>
#include <stdio.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/ping_probe.h"
#include "bench/process_cpu.h"
#include "bench/registry.h"
#include "clients/pattern_bytes.h"
#include "common/flag_parser.h"
#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct ResultsFlags {
  uint64_t closures = 2000;
  uint64_t bytes = 256 << 10;
  std::string function = "bytes";  // or echo: the args are the result (and are held too)
  std::string dispatcher_binary = testing::DispatcherBinary();
  std::string synchronous = "normal";
  std::string restart = "true";  // kill -9 and recover before fetching
  uint64_t ping_hz = 1000;
  uint64_t idle_ms = 2000;
  std::string result_file_bytes;  // the dispatcher's --result-file-bytes; empty: its default
  std::string result_bytes_per_call;  // the dispatcher's --max-result-bytes-per-call; empty: its default
  uint64_t inputs_per_closure = 0;  // 0: no inputs phase
};

double MiB(uint64_t bytes) { return bytes / 1048576.0; }

uint64_t RssBytes(pid_t pid) {
  const long kib = ProcStatusField("/proc/" + std::to_string(pid) + "/status", "VmRSS");
  return kib < 0 ? 0 : static_cast<uint64_t>(kib) * 1024;
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

class Dispatcher {
 public:
  Dispatcher(const ResultsFlags& flags, const testing::TempDir& dir)
      : flags_(flags), socket_("unix:" + dir.File("d.sock")), work_dir_(dir.File("work")) {}
  // Starts it and returns the seconds until it listened (recovery included).
  double Start() {
    auto begin = Clock::now();
    std::vector<std::string> argv{flags_.dispatcher_binary, "--listen=" + socket_, "--http=off",
                                  "--work-dir=" + work_dir_, "--synchronous=" + flags_.synchronous,
                                  "--log-level=warning"};
    if (!flags_.result_file_bytes.empty())
      argv.push_back("--result-file-bytes=" + flags_.result_file_bytes);
    if (!flags_.result_bytes_per_call.empty())
      argv.push_back("--max-result-bytes-per-call=" + flags_.result_bytes_per_call);
    process_ = std::make_unique<testing::Subprocess>(argv);
    auto line = process_->ReadLine(std::chrono::seconds(600));
    if (!line || line->rfind("dispatcher listening on ", 0) != 0)
      throw std::runtime_error("the dispatcher did not start");
    return Seconds(begin);
  }
  void Kill9() {
    process_->Signal(SIGKILL);
    process_->Wait(std::chrono::seconds(30));
  }
  pid_t pid() const { return process_->pid(); }
  const std::string& address() const { return socket_; }

 private:
  const ResultsFlags& flags_;
  std::string socket_;
  std::string work_dir_;
  std::unique_ptr<testing::Subprocess> process_;
};

uint64_t Finished(testing::ClientLoop& loop, clients::DispatcherConnection& conn) {
  return loop.Wait(conn.dispatcher().getClosureStatsRequest().send()).getStats().getFinished();
}

// The session of coordinator 99: every phase schedules and fetches as it
// (a dependant's inputs must be its own coordinator's closures).
rpc::Coordinator::Client OpenSession(clients::DispatcherConnection& conn) {
  auto open = conn.dispatcher().openCoordinatorRequest();
  open.setCoordinatorId(99);
  return open.send().getCoordinator();
}

// The dispatcher's own loop figures (ServerStats): passes, the longest
// busy one since start, and those over 10 ms. Pings measure the loop plus
// the pinger's own scheduling; these measure the loop alone.
struct LoopFigures {
  uint64_t passes = 0, max_us = 0, over_10ms = 0;
};

LoopFigures GetLoopFigures(testing::ClientLoop& loop, clients::DispatcherConnection& conn) {
  auto stats = loop.Wait(conn.dispatcher().getServerStatsRequest().send()).getStats();
  return {stats.getLoopPasses(), stats.getMaxLoopPassMicros(), stats.getLoopPassesOver10Ms()};
}

// "longest pass since start 4.2 ms (1.0 ms before this phase), 0 of 51234
// passes here over 10 ms"
std::string FormatLoopFigures(const LoopFigures& before, const LoopFigures& after) {
  if (after.passes == 0) return "not reported by this dispatcher";
  char line[200];
  snprintf(line, sizeof(line),
           "longest pass since start %.1f ms (%.1f ms before this phase), %llu of %llu passes "
           "here over 10 ms",
           static_cast<double>(after.max_us) / 1000, static_cast<double>(before.max_us) / 1000,
           static_cast<unsigned long long>(after.over_10ms - before.over_10ms),
           static_cast<unsigned long long>(after.passes - before.passes));
  return line;
}

// One echo closure per --inputs-per-closure held results, in id order,
// taking them as inputs: the dispatcher reads those back from its store and
// pushes them with the assignment. Prints the pings and the loop meanwhile.
void RunInputsPhase(const ResultsFlags& flags, Dispatcher& dispatcher,
                    const std::map<uint64_t, uint64_t>& seed_of, std::set<uint64_t>& dependants) {
  std::vector<uint64_t> ids;
  for (const auto& [id, seed] : seed_of) ids.push_back(id);
  const uint64_t k = flags.inputs_per_closure;
  auto begin = Clock::now();
  auto probe = std::make_unique<PingProbe>(dispatcher.address(), flags.ping_hz);
  LoopFigures before, after;
  {
    testing::ClientLoop loop;
    auto conn = loop.Connect(dispatcher.address());
    before = GetLoopFigures(loop, *conn);
    auto session = OpenSession(*conn);
    constexpr uint64_t kPerCall = 500;
    for (uint64_t first = 0; first < ids.size(); first += k * kPerCall) {
      const uint64_t n = std::min<uint64_t>(kPerCall, (ids.size() - first + k - 1) / k);
      auto request = session.scheduleRequest();
      auto list = request.initClosures(static_cast<unsigned>(n));
      for (uint64_t i = 0; i < n; ++i) {
        list[i].setFunction("echo");
        list[i].setArgs(capnp::Data::Reader(reinterpret_cast<const kj::byte*>("x"), 1));
        const uint64_t from = first + i * k;
        const uint64_t to = std::min<uint64_t>(from + k, ids.size());
        auto inputs = list[i].initInputs(static_cast<unsigned>(to - from));
        for (uint64_t j = from; j < to; ++j) inputs.set(static_cast<unsigned>(j - from), ids[j]);
      }
      auto reply = loop.Wait(request.send(), 600 * kj::SECONDS);
      for (uint64_t id : reply.getClosureIds()) dependants.insert(id);
    }
    if (!testing::WaitUntil(
            [&]() { return Finished(loop, *conn) >= ids.size() + dependants.size(); },
            loop.Every(std::chrono::milliseconds(50)), std::chrono::hours(1))) {
      throw std::runtime_error("the dependants did not finish");
    }
    after = GetLoopFigures(loop, *conn);
  }
  const double seconds = Seconds(begin);
  const PingFigures pings = SummarizePings(probe->Stop());
  printf("%-44s %12.2f\n", "push every result as an input (s)", seconds);
  printf("%-44s %12.1f\n", "input rate (MiB/s)", MiB(ids.size() * flags.bytes) / seconds);
  printf("pings while inputs are pushed: %s\n", FormatPingFigures(pings).c_str());
  printf("loop while inputs are pushed: %s\n", FormatLoopFigures(before, after).c_str());
  fflush(stdout);
}

int RunResultsBench(int argc, char** argv) {
  ResultsFlags flags;
  FlagParser parser("dispatch-bench results",
                    "Unfetched closure results held by the dispatcher: its RSS while holding "
                    "them, after kill -9 and recovery, and the time to fetch them all.");
  parser.AddUint("closures", "closures whose results are held", &flags.closures, 1, 10000000);
  parser.AddUint("bytes", "bytes of each result", &flags.bytes, 0, 1u << 30);
  parser.AddString("function", "NAME",
                   "bytes (results of --bytes bytes from tiny args) or echo (args of --bytes "
                   "bytes, returned)",
                   &flags.function);
  parser.AddString("dispatcher-binary", "PATH", "the dispatcher to measure",
                   &flags.dispatcher_binary);
  parser.AddString("synchronous", "MODE", "the dispatcher's --synchronous", &flags.synchronous);
  parser.AddString("restart", "BOOL",
                   "true: kill -9 the dispatcher and restart it before fetching; false: fetch "
                   "from the process that received the results",
                   &flags.restart);
  parser.AddUint("ping-hz", "pings per second while results are stored and fetched",
                 &flags.ping_hz, 1, 100000);
  parser.AddString("result-file-bytes", "N",
                   "the dispatcher's --result-file-bytes (empty: its default; 0: every result a "
                   "row, as before result files)",
                   &flags.result_file_bytes);
  parser.AddString("max-result-bytes-per-call", "N",
                   "the dispatcher's --max-result-bytes-per-call (empty: its default)",
                   &flags.result_bytes_per_call);
  parser.AddUint("inputs-per-closure",
                 "after recovery, one echo closure per this many held results, taking them as "
                 "its inputs (the dispatcher reads them back and pushes them to the worker); "
                 "0: no such phase",
                 &flags.inputs_per_closure, 0, 10000);
  parser.AddUint("idle-ms", "pinging an idle dispatcher first for this long (the floor)",
                 &flags.idle_ms, 1, 600000);
  ParseFlagsOrExit(parser, argc, argv);

  testing::TempDir dir;
  Dispatcher dispatcher(flags, dir);
  dispatcher.Start();
  const uint64_t rss_empty = RssBytes(dispatcher.pid());
  testing::Subprocess worker({DISPATCH_WORKER_BINARY, "--dispatcher=" + dispatcher.address(),
                              "--address=tcp:127.0.0.1:0", "--max-closures=4",
                              "--log-level=warning"});
  for (int lines = 0; lines < 2; ++lines) {
    if (!worker.ReadLine(std::chrono::seconds(30))) throw std::runtime_error("no worker");
  }

  PingFigures idle_pings;
  {
    PingProbe probe(dispatcher.address(), flags.ping_hz);
    std::this_thread::sleep_for(std::chrono::milliseconds(flags.idle_ms));
    idle_pings = SummarizePings(probe.Stop());
  }

  std::map<uint64_t, uint64_t> seed_of;
  auto begin = Clock::now();
  auto store_probe = std::make_unique<PingProbe>(dispatcher.address(), flags.ping_hz);
  LoopFigures store_loop_before, store_loop_after;
  {
    testing::ClientLoop loop;
    auto conn = loop.Connect(dispatcher.address());
    store_loop_before = GetLoopFigures(loop, *conn);
    auto session = OpenSession(*conn);
    // Schedule calls of at most 500 closures and about 16 MiB of args.
    const uint64_t arg_bytes = flags.function == "echo" ? std::max<uint64_t>(flags.bytes, 1) : 16;
    const uint64_t per_call = std::clamp<uint64_t>((16u << 20) / arg_bytes, 1, 500);
    for (uint64_t first = 0; first < flags.closures; first += per_call) {
      const uint64_t n = std::min<uint64_t>(per_call, flags.closures - first);
      auto request = session.scheduleRequest();
      auto list = request.initClosures(static_cast<unsigned>(n));
      std::vector<std::string> args(n);
      for (uint64_t i = 0; i < n; ++i) {
        args[i] = flags.function == "echo" ? clients::PatternBytes(flags.bytes, first + i)
                                           : std::to_string(flags.bytes) + ":" +
                                                 std::to_string(first + i);
        list[i].setFunction(flags.function);
        list[i].setArgs(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(args[i].data()),
                                            args[i].size()));
      }
      auto reply = loop.Wait(request.send(), 600 * kj::SECONDS);
      uint64_t i = 0;
      for (uint64_t id : reply.getClosureIds()) seed_of[id] = first + i++;
    }
    if (!testing::WaitUntil([&]() { return Finished(loop, *conn) >= flags.closures; },
                            loop.Every(std::chrono::milliseconds(50)), std::chrono::hours(1))) {
      throw std::runtime_error("the closures did not finish");
    }
    store_loop_after = GetLoopFigures(loop, *conn);
  }
  const double run_seconds = Seconds(begin);
  const PingFigures store_pings = SummarizePings(store_probe->Stop());
  const uint64_t rss_held = RssBytes(dispatcher.pid());
  double recovery_seconds = 0;
  uint64_t rss_recovered = rss_held;
  if (flags.restart != "false") {
    dispatcher.Kill9();
    recovery_seconds = dispatcher.Start();
    rss_recovered = RssBytes(dispatcher.pid());
  }
  const uint64_t held = flags.closures * flags.bytes;
  printf("\nresults: %llu closures x %llu bytes (%s) = %.1f MiB held, dispatcher %s\n",
         static_cast<unsigned long long>(flags.closures),
         static_cast<unsigned long long>(flags.bytes), flags.function.c_str(), MiB(held),
         flags.dispatcher_binary.c_str());
  printf("%-44s %12s\n", "figure", "measured");
  printf("%-44s %12.1f\n", "dispatcher VmRSS at start (MiB)", MiB(rss_empty));
  printf("%-44s %12.1f\n", "VmRSS holding every result (MiB)", MiB(rss_held));
  printf("%-44s %12.1f\n", "VmRSS after kill -9 and recovery (MiB)", MiB(rss_recovered));
  printf("%-44s %12.2f\n", "recovery: start to listening (s)", recovery_seconds);
  printf("%-44s %12.2f\n", "schedule, run and hold them all (s)", run_seconds);
  printf("pings at %llu Hz, idle dispatcher:  %s\n", static_cast<unsigned long long>(flags.ping_hz),
         FormatPingFigures(idle_pings).c_str());
  printf("pings while results are stored: %s\n", FormatPingFigures(store_pings).c_str());
  printf("loop while results are stored: %s\n",
         FormatLoopFigures(store_loop_before, store_loop_after).c_str());
  fflush(stdout);

  // Dependants: their outcomes ("x") come with the fetch below.
  std::set<uint64_t> dependants;
  if (flags.inputs_per_closure > 0) RunInputsPhase(flags, dispatcher, seed_of, dependants);

  begin = Clock::now();
  auto fetch_probe = std::make_unique<PingProbe>(dispatcher.address(), flags.ping_hz);
  uint64_t fetched = 0;
  uint64_t wrong = 0;
  uint64_t replies = 0;
  LoopFigures fetch_loop_before, fetch_loop_after;
  {
    testing::ClientLoop loop;
    auto conn = loop.Connect(dispatcher.address());
    fetch_loop_before = GetLoopFigures(loop, *conn);
    auto session = OpenSession(*conn);
    std::vector<uint64_t> release;
    while (fetched < flags.closures + dependants.size()) {
      auto request = session.awaitResultsRequest();
      auto list = request.initRelease(static_cast<unsigned>(release.size()));
      for (unsigned i = 0; i < release.size(); ++i) list.set(i, release[i]);
      // At most 16 MiB of results by count too, for dispatchers that do not
      // bound replies by bytes.
      request.setMaxResults(static_cast<uint32_t>(
          std::max<uint64_t>(1, (16u << 20) / std::max<uint64_t>(flags.bytes, 1))));
      auto reply = loop.Wait(request.send(), 600 * kj::SECONDS);
      ++replies;
      release.clear();
      for (auto outcome : reply.getResults()) {
        auto bytes = outcome.getResult();
        auto seed = seed_of.find(outcome.getClosureId());
        if (dependants.contains(outcome.getClosureId())) {
          if (std::string_view(bytes.asChars().begin(), bytes.size()) != "x") ++wrong;
        } else if (seed == seed_of.end() ||
            std::string_view(bytes.asChars().begin(), bytes.size()) !=
                clients::PatternBytes(flags.bytes, seed->second)) {
          ++wrong;
        }
        release.push_back(outcome.getClosureId());
        ++fetched;
      }
    }
    auto request = session.awaitResultsRequest();
    auto list = request.initRelease(static_cast<unsigned>(release.size()));
    for (unsigned i = 0; i < release.size(); ++i) list.set(i, release[i]);
    auto last = request.send();
    testing::WaitUntil([&]() { return Finished(loop, *conn) == 0; },
                       loop.Every(std::chrono::milliseconds(50)), std::chrono::minutes(10));
    fetch_loop_after = GetLoopFigures(loop, *conn);
  }
  const double fetch_seconds = Seconds(begin);
  const PingFigures fetch_pings = SummarizePings(fetch_probe->Stop());
  const uint64_t rss_fetched = RssBytes(dispatcher.pid());
  dispatcher.Kill9();

  printf("%-44s %12.2f\n", "fetch and release them all (s)", fetch_seconds);
  printf("%-44s %12.1f\n", "fetch rate (MiB/s)", MiB(held) / fetch_seconds);
  printf("%-44s %12llu\n", "awaitResults replies", static_cast<unsigned long long>(replies));
  printf("pings while results are fetched and released: %s\n",
         FormatPingFigures(fetch_pings).c_str());
  printf("loop while results are fetched and released: %s\n",
         FormatLoopFigures(fetch_loop_before, fetch_loop_after).c_str());
  printf("%-44s %12.1f\n", "VmRSS after fetching them all (MiB)", MiB(rss_fetched));
  printf("%-44s %12llu\n", "results fetched wrong (must be 0)", static_cast<unsigned long long>(wrong));
  return wrong == 0 ? 0 : 1;
}

DISPATCH_BENCH("results", "unfetched closure results: dispatcher RSS held, recovered, fetched",
               RunResultsBench);

}  // namespace
}  // namespace dispatch::bench
