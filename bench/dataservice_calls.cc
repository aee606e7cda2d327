#include "bench/dataservice_calls.h"

#include <kj/async.h>
#include <kj/vector.h>

#include <chrono>
#include <functional>
#include <stdexcept>

#include "bench/latency.h"
#include "bench/sim_workers.h"
#include "schema/dispatcher.capnp.h"
#include "tests/integration/client_loop.h"

namespace dispatch::bench {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ClientLoop;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

capnp::Data::Reader AsData(const std::string& bytes) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size());
}

uint64_t RegisterDataset(ClientLoop& loop, rpc::Dispatcher::Client& d, const std::string& definition,
                         uint64_t indexed) {
  auto request = d.getOrRegisterDatasetRequest();
  request.setDefinition(AsData(definition));
  request.initSplitSource().setIndexed(indexed);
  return loop.Wait(request.send()).getDatasetId();
}

kj::Promise<uint64_t> CreateJob(rpc::Dispatcher::Client& d, uint64_t dataset,
                                rpc::ProcessingMode mode) {
  auto request = d.getOrCreateJobRequest();
  auto job = request.initRequest();
  job.setDatasetId(dataset);
  job.setProcessingMode(mode);
  return request.send().then([](auto response) { return response.getJobId(); });
}

kj::Promise<uint64_t> GetSplit(rpc::Dispatcher::Client& d, uint64_t task, uint64_t sequence,
                               uint32_t max_splits) {
  auto request = d.getSplitRequest();
  auto body = request.initRequest();
  body.setTaskId(task);
  body.setRepetition(0);
  body.setSequence(sequence);
  body.setMaxSplits(max_splits);
  return request.send().then(
      [](auto response) -> uint64_t { return response.getResponse().getSplits().size(); });
}

}  // namespace

void DeclareSplitAndJobFlags(FlagParser& parser, SplitRun& splits, JobRun& jobs) {
  parser.AddUint("single-splits", "sequential single-split getSplit calls", &splits.single_splits, 1, 100000000);
  parser.AddUint("batch", "maxSplits of the batched getSplit calls", &splits.batch, 2, 1 << 20);
  parser.AddUint("batched-calls", "sequential batched getSplit calls", &splits.batched_calls, 1, 10000000);
  parser.AddUint("jobs-sequential", "sequential getOrCreateJob calls", &jobs.sequential, 1, 10000000);
  parser.AddUint("jobs-pipelined", "pipelined getOrCreateJob calls", &jobs.pipelined, 1, 10000000);
  parser.AddUint("in-flight", "calls in flight when pipelined", &jobs.in_flight, 1, 100000);
}

SplitFigures MeasureSplits(const std::string& address, const SplitRun& run) {
  ClientLoop loop;
  SimConnection worker;
  worker.conn = loop.Connect(address);
  auto client = loop.Connect(address);
  auto& d = client->dispatcher();
  loop.Wait(SendSimHeartbeat(worker, 0));
  uint64_t dataset = RegisterDataset(loop, d, "bench-splits", 1ull << 40);
  uint64_t job = loop.Wait(CreateJob(d, dataset, rpc::ProcessingMode::DYNAMIC));
  // The worker's next heartbeat lists its new task.
  uint64_t task = 0;
  {
    auto request = worker.conn->dispatcher().workerHeartbeatRequest();
    auto body = request.initRequest();
    body.setAddress("sim-worker-0");
    body.setTransferAddress("sim-worker-0/transfer");
    body.setWorkerIncarnation(1);
    body.setControl(worker.control);
    auto response = loop.Wait(request.send());
    for (auto info : response.getResponse().getNewTasks())
      if (info.getJobId() == job) task = info.getTaskId();
  }
  if (task == 0) throw std::runtime_error("the simulated worker got no task for the job");

  SplitFigures f;
  uint64_t sequence = 0;
  LatencySamples samples;
  samples.Reserve(run.single_splits);
  auto start = Clock::now();
  for (uint64_t i = 0; i < run.single_splits; ++i) {
    auto t0 = Clock::now();
    loop.Wait(GetSplit(d, task, ++sequence, 1));
    samples.Add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  }
  f.single_per_s = run.single_splits / SecondsSince(start);
  f.p50_ms = samples.PercentileMicros(50) / 1000;
  f.p99_ms = samples.PercentileMicros(99) / 1000;

  LatencySamples batched;
  uint64_t splits = 0;
  start = Clock::now();
  for (uint64_t i = 0; i < run.batched_calls; ++i) {
    auto t0 = Clock::now();
    splits += loop.Wait(GetSplit(d, task, ++sequence, static_cast<uint32_t>(run.batch)));
    batched.Add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  }
  f.batched_per_s = splits / SecondsSince(start);
  f.batched_call_p50_ms = batched.PercentileMicros(50) / 1000;
  return f;
}

JobFigures MeasureJobs(const std::string& address, const JobRun& run) {
  ClientLoop loop;
  auto client = loop.Connect(address);
  auto& d = client->dispatcher();
  uint64_t dataset = RegisterDataset(loop, d, "bench-jobs", 1000);
  JobFigures f;
  auto start = Clock::now();
  for (uint64_t i = 0; i < run.sequential; ++i)
    loop.Wait(CreateJob(d, dataset, rpc::ProcessingMode::OFF));
  f.sequential_per_s = run.sequential / SecondsSince(start);

  uint64_t sent = 0;
  std::function<kj::Promise<void>()> chain = [&]() -> kj::Promise<void> {
    if (sent >= run.pipelined) return kj::READY_NOW;
    ++sent;
    return CreateJob(d, dataset, rpc::ProcessingMode::OFF).then([&](uint64_t) {
      return chain();
    });
  };
  kj::Vector<kj::Promise<void>> chains;
  start = Clock::now();
  for (uint64_t i = 0; i < run.in_flight; ++i) chains.add(chain());
  loop.Wait(kj::joinPromises(chains.releaseAsArray()), 600 * kj::SECONDS);
  f.pipelined_per_s = run.pipelined / SecondsSince(start);
  return f;
}

}  // namespace dispatch::bench
