// DataService: the data-service half of the dispatcher, behind the
// DispatcherService methods in dataset_, job_, split_, worker_ and
// listing_service.cc. It holds what they share (options and the policy the
// planners read, the soft state they read, worker registry, dataset catalog,
// timers in gc_timers.cc) and no state of record: every change goes through
// DurableState::Submit. Its handlers decode a request, ask a planner in
// state/ (split_planner.h, worker_planner.h, job_planner.h,
// consumer_planner.h), carry the plan out (Carry, then the soft changes and
// the pushes) and encode the answer.
// REQUIRES: loop thread only; created after DurableState recovered.
#pragma once

#include <capnp/message.h>
#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reactor/closure_dispatcher.h"
#include "reactor/data_service_options.h"
#include "reactor/dataset_catalog.h"
#include "reactor/durable_state.h"
#include "reactor/uvkj/repeating_timer.h"
#include "reactor/worker_registry.h"
#include "state/closure_updates.h"
#include "state/data_policy.h"
#include "state/soft_state.h"

namespace dispatch::reactor {

struct DataServiceStats {
  uint64_t jobs_garbage_collected = 0;
  uint64_t clients_timed_out = 0;
  uint64_t splits_handed_out = 0;  // fresh splits granted by getSplit (not repeats)
  uint64_t tasks_handed_over = 0;  // finished for a worker gone past its grace period
};

class DataService {
 public:
  DataService(uv_loop_t* loop, DurableState& durable, DataServiceOptions options,
              uint64_t incarnation);
  ~DataService();
  DataService(const DataService&) = delete;
  DataService& operator=(const DataService&) = delete;

  // Before serving: without fault-tolerant mode forgets the recovered state
  // (ids stay unique); primes the soft state; starts the timers.
  Status Start();
  void StopTimers();

  const DataServiceOptions& options() const { return options_; }
  DurableState& durable() { return durable_; }
  const state::DispatcherState& state() const { return durable_.state(); }
  uint64_t incarnation() const { return incarnation_; }
  WorkerRegistry& workers() { return workers_; }
  // What the planners read besides the state (state/soft_state.h).
  const state::SoftState& soft() const { return soft_; }
  state::SoftState& mutable_soft() { return soft_; }
  // What the planners are told (the options, as state/data_policy.h has them).
  const state::DataPolicy& policy() const { return policy_; }
  DatasetCatalog& datasets() { return datasets_; }
  ClosureDispatcher& closures() { return *closures_; }
  const DataServiceStats& stats() const { return stats_; }
  DataServiceStats& mutable_stats() { return stats_; }

  // Builds one Update with `fill(update)` at the current time and submits it.
  template <typename Fill>
  Status Submit(Fill&& fill) {
    capnp::MallocMessageBuilder message;
    auto update = message.initRoot<journal::Update>();
    update.setTimeMicros(durable_.pipeline().NowMicros());
    fill(update);
    return durable_.pipeline().Submit(update);
  }
  // The time and record limit of the Updates planned now.
  state::Stamp Stamp() const;
  // The serving clock (liveness is measured on it): ServingClock::NowMs.
  uint64_t NowMs() const { return serving_clock_.NowMs(); }
  // Submits a plan's Updates in order; the first refusal, if any.
  Status Carry(const state::UpdateList& updates);
  // Submits update `i` of a plan.
  Status CarryOne(const state::UpdateList& updates, size_t i);
  // The split sources the planners ask about (DatasetCatalog).
  const state::SplitSourceLookup& split_sources() const { return split_sources_; }

  // FailedPrecondition when a worker list is configured without `address`.
  Status CheckWorkerAddress(std::string_view address) const;
  // Length limits on names and addresses coming from peers.
  Status CheckName(std::string_view what, std::string_view value) const;

  // Timer bodies (gc_timers.cc); public so tests of the timers can read them.
  void RunJobGc();
  void RunLivenessCheck();
  // Hands over the tasks of addresses without a worker for the grace period
  // (state::PlanTaskHandOvers); part of the liveness check.
  void RunHandOvers();

 private:
  void StartTimers();

  uv_loop_t* const loop_;
  DurableState& durable_;
  const DataServiceOptions options_;
  const uint64_t incarnation_;
  const state::DataPolicy policy_;
  ServingClock serving_clock_;  // before the registries that read it
  state::SoftState soft_;       // before the registry that keeps its workers' part
  WorkerRegistry workers_;
  DatasetCatalog datasets_;
  state::SplitSourceLookup split_sources_;  // reads datasets_
  // Shared with the coordinator sessions (see closure_dispatcher.h); closed
  // by ~DataService, before workers_ and the borrowed DurableState go.
  kj::Own<ClosureDispatcher> closures_;
  DataServiceStats stats_;
  std::unique_ptr<uvkj::UvRepeatingTimer> job_gc_timer_;
  std::unique_ptr<uvkj::UvRepeatingTimer> liveness_timer_;
};

}  // namespace dispatch::reactor
