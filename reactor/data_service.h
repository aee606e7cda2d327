// DataService: the data-service half of the dispatcher, behind the
// DispatcherService methods in dataset_, job_, split_, worker_ and
// listing_service.cc. It holds what they share (options, worker registry,
// consumer tracker, dataset catalog, timers in gc_timers.cc) and no state of
// record: every change goes through DurableState::Submit.
// REQUIRES: loop thread only; created after DurableState recovered.
#pragma once

#include <capnp/message.h>
#include <uv.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reactor/closure_dispatcher.h"
#include "reactor/consumer_tracker.h"
#include "reactor/data_service_options.h"
#include "reactor/dataset_catalog.h"
#include "reactor/durable_state.h"
#include "reactor/uvkj/repeating_timer.h"
#include "reactor/worker_registry.h"

namespace dispatch::reactor {

struct DataServiceStats {
  uint64_t jobs_garbage_collected = 0;
  uint64_t clients_timed_out = 0;
  uint64_t splits_handed_out = 0;  // fresh splits granted by getSplit (not repeats)
};

class DataService {
 public:
  DataService(uv_loop_t* loop, DurableState& durable, DataServiceOptions options,
              uint64_t incarnation);
  ~DataService();
  DataService(const DataService&) = delete;
  DataService& operator=(const DataService&) = delete;

  // Before serving: without fault-tolerant mode forgets the recovered state
  // (ids stay unique); primes the worker registry and the consumer tracker;
  // starts the timers.
  Status Start();
  void StopTimers();

  const DataServiceOptions& options() const { return options_; }
  DurableState& durable() { return durable_; }
  const state::DispatcherState& state() const { return durable_.state(); }
  uint64_t incarnation() const { return incarnation_; }
  WorkerRegistry& workers() { return workers_; }
  ConsumerTracker& consumers() { return consumers_; }
  DatasetCatalog& datasets() { return datasets_; }
  ClosureDispatcher& closures() { return *closures_; }
  const DataServiceStats& stats() const { return stats_; }
  DataServiceStats& mutable_stats() { return stats_; }

  // Builds one Update with `fill(update)` at the current time and submits it.
  template <typename Fill>
  Status Submit(Fill&& fill) {
    capnp::MallocMessageBuilder message;
    auto update = message.initRoot<journal::Update>();
    update.setTimeMicros(durable_.NowMicros());
    fill(update);
    return durable_.Submit(update);
  }

  // FailedPrecondition when a worker list is configured without `address`.
  Status CheckWorkerAddress(std::string_view address) const;
  // Length limits on names and addresses coming from peers.
  Status CheckName(std::string_view what, std::string_view value) const;

  // A new job gets a task on every registered worker that can produce its
  // dataset's kind; connected workers are told once the pass commits.
  Status CreateTasksForJob(uint64_t job_id);
  // Creates the tasks the worker at `address` lacks for unfinished jobs whose
  // dataset it can produce:
  // active ones, or pending ones (starting after the consumers' current
  // round) for round-robin jobs. Returns the new task ids.
  Result<std::vector<uint64_t>> CreateMissingTasks(const std::string& address);
  // The job's tasks, active and pending, by worker address (to withdraw them).
  std::map<std::string, std::vector<uint64_t>> TasksByWorker(uint64_t job_id) const;

  // Timer bodies (gc_timers.cc); public so tests of the timers can read them.
  void RunJobGc();
  void RunLivenessCheck();

 private:
  void StartTimers();

  uv_loop_t* const loop_;
  DurableState& durable_;
  const DataServiceOptions options_;
  const uint64_t incarnation_;
  ServingClock serving_clock_;  // before the registries that read it
  WorkerRegistry workers_;
  ConsumerTracker consumers_;
  DatasetCatalog datasets_;
  // Shared with the coordinator sessions (see closure_dispatcher.h); closed
  // by ~DataService, before workers_ and the borrowed DurableState go.
  kj::Own<ClosureDispatcher> closures_;
  DataServiceStats stats_;
  std::unique_ptr<uvkj::UvRepeatingTimer> job_gc_timer_;
  std::unique_ptr<uvkj::UvRepeatingTimer> liveness_timer_;
};

}  // namespace dispatch::reactor
