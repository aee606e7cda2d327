// `dispatch-bench ping`: round trips to the libuv-driven dispatcher against
// the same interface on Cap'n Proto's own loop (EzRpcServer), measured in one
// run with one client (EzRpcClient) so only the server side differs. Runs
// alternate between the two servers; each figure is the median over runs.
#include <stdio.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <capnp/ez-rpc.h>
#include <kj/async.h>

#include "bench/baseline_process.h"
#include "bench/latency.h"
#include "bench/registry.h"
#include "common/flag_parser.h"
#include "schema/dispatcher.capnp.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/subprocess.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct PingFlags {
  uint64_t runs = 5;
  uint64_t sequential = 20000;
  uint64_t pipelined = 100000;
  uint64_t in_flight = 64;
  uint64_t payload = 64;
  uint64_t warmup = 500;
};

struct Figures {
  double p50_us = 0, p99_us = 0, seq_per_s = 0, pipe_per_s = 0;
};

uint64_t NanosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

Figures Measure(const std::string& address, const PingFlags& flags) {
  capnp::EzRpcClient client(address.substr(4).c_str());
  auto& ws = client.getWaitScope();
  auto gateway = client.getMain<rpc::Gateway>();
  rpc::Dispatcher::Client dispatcher = gateway.authenticateRequest().send().wait(ws).getDispatcher();
  auto payload = kj::heapArray<kj::byte>(flags.payload);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<kj::byte>(i);

  auto ping = [&]() {
    auto request = dispatcher.pingRequest();
    request.setPayload(payload);
    return request.send();
  };
  for (uint64_t i = 0; i < flags.warmup; ++i) ping().wait(ws);

  Figures figures;
  LatencySamples samples;
  samples.Reserve(flags.sequential);
  auto start = Clock::now();
  for (uint64_t i = 0; i < flags.sequential; ++i) {
    auto t0 = Clock::now();
    ping().wait(ws);
    samples.Add(NanosSince(t0));
  }
  figures.seq_per_s = flags.sequential / (NanosSince(start) / 1e9);
  figures.p50_us = samples.PercentileMicros(50);
  figures.p99_us = samples.PercentileMicros(99);

  // Pipelined: `in_flight` chains, each sending its next call when its
  // previous reply arrives, until `pipelined` calls are done in total.
  uint64_t sent = 0;
  std::function<kj::Promise<void>()> chain = [&]() -> kj::Promise<void> {
    if (sent >= flags.pipelined) return kj::READY_NOW;
    ++sent;
    return ping().then([&](auto) { return chain(); });
  };
  kj::Vector<kj::Promise<void>> chains;
  start = Clock::now();
  for (uint64_t i = 0; i < flags.in_flight; ++i) chains.add(chain());
  kj::joinPromises(chains.releaseAsArray()).wait(ws);
  figures.pipe_per_s = flags.pipelined / (NanosSince(start) / 1e9);
  return figures;
}

int RunPingBench(int argc, char** argv) {
  PingFlags flags;
  FlagParser parser("dispatch-bench ping",
                    "Sequential and pipelined ping round trips: dispatcher (libuv loop) vs "
                    "EzRpcServer (KJ's own loop), same client, same run.");
  parser.AddUint("runs", "runs per server (alternating); figures are medians", &flags.runs, 1, 100);
  parser.AddUint("sequential", "sequential calls per run", &flags.sequential, 1, 10000000);
  parser.AddUint("pipelined", "pipelined calls per run", &flags.pipelined, 1, 100000000);
  parser.AddUint("in-flight", "calls in flight in the pipelined phase", &flags.in_flight, 1, 100000);
  parser.AddUint("payload", "ping payload bytes", &flags.payload, 0, 1 << 24);
  parser.AddUint("warmup", "calls before measuring", &flags.warmup, 0, 1000000);
  ParseFlagsOrExit(parser, argc, argv);

  std::vector<Figures> uv_runs, ez_runs;
  for (uint64_t run = 0; run < flags.runs; ++run) {
    {
      testing::DispatcherProcess dispatcher;
      uv_runs.push_back(Measure(dispatcher.address(), flags));
    }
    {
      std::string address;
      auto baseline = StartBaseline(&address);
      ez_runs.push_back(Measure(address, flags));
    }
    fprintf(stderr, "run %llu/%llu: dispatcher seq p50 %.1f us, baseline %.1f us\n",
            static_cast<unsigned long long>(run + 1), static_cast<unsigned long long>(flags.runs),
            uv_runs.back().p50_us, ez_runs.back().p50_us);
  }

  auto median = [](const std::vector<Figures>& runs, double Figures::*field) {
    std::vector<double> values;
    for (auto& f : runs) values.push_back(f.*field);
    return Median(values);
  };
  struct Row {
    const char* name;
    double Figures::*field;
    bool lower_is_better;
  };
  const Row rows[] = {{"sequential p50 (us)", &Figures::p50_us, true},
                      {"sequential p99 (us)", &Figures::p99_us, true},
                      {"sequential calls/s", &Figures::seq_per_s, false},
                      {"pipelined calls/s", &Figures::pipe_per_s, false}};
  printf("\nping: %llu runs, %llu sequential + %llu pipelined calls (%llu in flight), %llu-byte payload\n",
         static_cast<unsigned long long>(flags.runs), static_cast<unsigned long long>(flags.sequential),
         static_cast<unsigned long long>(flags.pipelined), static_cast<unsigned long long>(flags.in_flight),
         static_cast<unsigned long long>(flags.payload));
  printf("%-24s %14s %14s %10s\n", "figure (median)", "dispatcher", "EzRpcServer", "cost");
  bool all_within = true;
  for (const Row& row : rows) {
    double uv = median(uv_runs, row.field);
    double ez = median(ez_runs, row.field);
    // cost > 1 means the dispatcher is worse; the target is cost <= 1.2.
    double cost = row.lower_is_better ? uv / ez : ez / uv;
    all_within = all_within && cost <= 1.2;
    printf("%-24s %14.1f %14.1f %9.2fx\n", row.name, uv, ez, cost);
  }
  printf("target: cost <= 1.20x on every figure: %s\n", all_within ? "met" : "NOT met");
  return 0;
}

DISPATCH_BENCH("ping", "RPC round trips: dispatcher vs EzRpcServer baseline", RunPingBench);

}  // namespace
}  // namespace dispatch::bench
