#include "bench/ping_probe.h"

#include <stdio.h>
#include <time.h>

#include <chrono>

#include <capnp/ez-rpc.h>
#include <kj/async-io.h>
#include <kj/async.h>
#include <kj/debug.h>

#include "bench/latency.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::bench {

PingProbe::PingProbe(std::string address, uint64_t hz)
    : address_(std::move(address)), hz_(hz == 0 ? 1 : hz), thread_([this]() { Run(); }) {}

PingProbe::~PingProbe() {
  if (thread_.joinable()) Stop();
}

void PingProbe::Run() {
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
    capnp::EzRpcClient client(address_.c_str());
    auto& ws = client.getWaitScope();
    auto& timer = client.getIoProvider().getTimer();
    auto dispatcher =
        client.getMain<rpc::Gateway>().authenticateRequest().send().wait(ws).getDispatcher();
    const uint64_t period_ns = 1000000000ull / hz_;
    // A TaskSet drops each ping's promise once answered, so a long run holds
    // only the pings in flight.
    struct IgnoreErrors : kj::TaskSet::ErrorHandler {
      void taskFailed(kj::Exception&&) override {}  // the ping stays unanswered
    } ignore_errors;
    kj::TaskSet pending(ignore_errors);
    uint64_t next = MonotonicNs();
    while (!stop_.load()) {
      const uint64_t now = MonotonicNs();
      if (next > now) {
        timer.afterDelay((next - now) * kj::NANOSECONDS).wait(ws);
        continue;
      }
      pings_.push_back(PingSample{next, 0});
      PingSample* ping = &pings_.back();  // deque: stays put as more are appended
      pending.add(dispatcher.pingRequest().send().then(
          [ping](auto&&) { ping->done_ns = MonotonicNs(); }));
      next += period_ns;
    }
    // The replies still due, for a while: a dispatcher that never answers
    // leaves them unanswered rather than hanging the bench.
    pending.onEmpty().exclusiveJoin(timer.afterDelay(30 * kj::SECONDS)).wait(ws);
  })) {
    fprintf(stderr, "ping probe: %s\n", e->getDescription().cStr());
  }
}

std::vector<PingSample> PingProbe::Stop() {
  stop_ = true;
  thread_.join();
  return std::vector<PingSample>(pings_.begin(), pings_.end());
}

PingFigures SummarizePings(const std::vector<PingSample>& pings,
                           const std::function<bool(const PingSample&)>& keep) {
  PingFigures f;
  LatencySamples samples;
  for (const PingSample& p : pings) {
    if (keep && !keep(p)) continue;
    ++f.pings;
    if (p.done_ns == 0) {
      ++f.unanswered;
      continue;
    }
    // A ping can leave a few microseconds before its tick (timer rounding).
    samples.Add(p.done_ns > p.scheduled_ns ? p.done_ns - p.scheduled_ns : 0);
  }
  if (samples.count() > 0) {
    f.p50_ms = samples.PercentileMicros(50) / 1000;
    f.p99_ms = samples.PercentileMicros(99) / 1000;
    f.p999_ms = samples.PercentileMicros(99.9) / 1000;
    f.max_ms = samples.PercentileMicros(100) / 1000;
  }
  return f;
}

std::string FormatPingFigures(const PingFigures& f) {
  char line[160];
  snprintf(line, sizeof line, "p50 %.3f  p99 %.3f  p99.9 %.3f  max %.3f ms (%zu pings%s)",
           f.p50_ms, f.p99_ms, f.p999_ms, f.max_ms, f.pings,
           f.unanswered > 0 ? ", some unanswered" : "");
  return line;
}

}  // namespace dispatch::bench
