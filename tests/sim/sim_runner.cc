#include "tests/sim/sim_runner.h"

#include <memory>
#include <vector>

#include "tests/sim/sim_actors.h"
#include "tests/sim/sim_dispatcher.h"
#include "tests/sim/sim_invariants.h"

namespace dispatch::sim {
namespace {

template <typename T>
T Pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  auto it = values.begin();
  std::advance(it, std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng));
  return *it;
}

int64_t Between(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

}  // namespace

const char* SimBugName(SimBug bug) {
  switch (bug) {
    case SimBug::kNone:
      return "none";
    case SimBug::kReplyBeforeCommit:
      return "ReplyBeforeCommit";
    case SimBug::kIgnoreFunctions:
      return "IgnoreFunctions";
    case SimBug::kUnjournaledRelease:
      return "UnjournaledRelease";
    case SimBug::kForgetOutcome:
      return "ForgetOutcome";
    case SimBug::kRetryForever:
      return "RetryForever";
    case SimBug::kSplitRetryNotIdempotent:
      return "SplitRetryNotIdempotent";
    case SimBug::kForgetRefusals:
      return "ForgetRefusals";
    case SimBug::kPushNoInputs:
      return "PushNoInputs";
    case SimBug::kRoundRobinIgnoresRounds:
      return "RoundRobinIgnoresRounds";
    case SimBug::kEndSplitsWhileHeld:
      return "EndSplitsWhileHeld";
  }
  return "unknown";
}

SimParams SimParams::Draw(std::mt19937_64& rng) {
  SimParams p;
  p.num_workers = static_cast<int>(Between(rng, 1, 4));
  p.num_coordinators = static_cast<int>(Between(rng, 1, 3));
  p.num_consumers = static_cast<int>(Between(rng, 0, 3));
  p.num_functions = static_cast<int>(Between(rng, 1, 4));
  p.max_closures = static_cast<int>(Between(rng, 5, 40));
  p.loss = Pick(rng, {0.0, 0.005, 0.02, 0.05});
  p.duplicate = Pick(rng, {0.0, 0.02, 0.1});
  p.max_delay_ms = static_cast<int>(Between(rng, 1, 8));
  p.worker_death = Pick(rng, {0.0, 0.002, 0.01});
  p.half_open = Pick(rng, {0.0, 0.3, 0.7});
  p.restart = Pick(rng, {0.0, 0.002, 0.01});
  p.crash_before_commit = Pick(rng, {0.0, 0.5, 1.0});
  p.commit_hold = Pick(rng, {false, true});
  p.snapshot_every = Pick<uint64_t>(rng, {0, 7, 40});
  p.policy.max_closure_attempts = Pick<uint64_t>(rng, {0, 1, 2, 3, 5});
  p.policy.transient_retries = Pick<uint64_t>(rng, {0, 1, 3});
  p.policy.start_delay_ms = Pick<uint64_t>(rng, {0, 0, 20});
  p.policy.start_delay_max_ms = Pick<uint64_t>(rng, {0, 50});
  p.worker_timeout_ms = Between(rng, 200, 600);
  p.client_timeout_ms = Between(rng, 200, 600);
  p.job_gc_timeout_ms = Between(rng, 100, 400);
  // Drawn last: the draws above, and so every earlier seed's world, stay.
  p.max_splits_per_call = Pick<uint64_t>(rng, {1, 2, 65536, 65536});
  p.worker_grace_ms = Pick<int64_t>(rng, {0, 50, 150, 1000});
  p.new_address = Pick(rng, {0.0, 0.5, 1.0});
  return p;
}

std::string SimParams::ToString() const {
  char text[512];
  std::snprintf(
      text, sizeof(text),
      "workers=%d coordinators=%d consumers=%d functions=%d max_closures=%d loss=%.3f "
      "duplicate=%.2f max_delay_ms=%d worker_death=%.3f half_open=%.1f restart=%.3f "
      "crash_before_commit=%.1f commit_hold=%d snapshot_every=%llu max_attempts=%llu "
      "transient_retries=%llu start_delay_ms=%llu/%llu timeouts(worker,client,gc)=%lld,%lld,%lld "
      "max_splits_per_call=%llu grace_ms=%lld new_address=%.1f",
      num_workers, num_coordinators, num_consumers, num_functions, max_closures, loss, duplicate,
      max_delay_ms, worker_death, half_open, restart, crash_before_commit, commit_hold ? 1 : 0,
      static_cast<unsigned long long>(snapshot_every),
      static_cast<unsigned long long>(policy.max_closure_attempts),
      static_cast<unsigned long long>(policy.transient_retries),
      static_cast<unsigned long long>(policy.start_delay_ms),
      static_cast<unsigned long long>(policy.start_delay_max_ms),
      static_cast<long long>(worker_timeout_ms), static_cast<long long>(client_timeout_ms),
      static_cast<long long>(job_gc_timeout_ms),
      static_cast<unsigned long long>(max_splits_per_call),
      static_cast<long long>(worker_grace_ms), new_address);
  return text;
}

std::string RerunCommand(uint64_t seed) {
  return "DISPATCH_SIM_SEED=" + std::to_string(seed) +
         " ./build/tests/sim/sim_test --gtest_filter=Simulation.SeedFromEnvironment";
}

namespace {

class World {
 public:
  explicit World(const SimOptions& options)
      : options_(options),
        ctx_(options.seed * 0x9E3779B97F4A7C15ull + 1, DrawParams(options.seed), options.bug),
        invariants_(ctx_.params.policy,
                    [this](const std::string& address, uint64_t incarnation) {
                      for (auto& worker : workers_)
                        if (worker->HadAddress(address)) return worker->FunctionsOf(incarnation);
                      return std::shared_ptr<const state::FunctionSet>();
                    }),
        dispatcher_(ctx_) {
    ctx_.observer = &invariants_;
    for (int i = 0; i < ctx_.params.num_workers; ++i)
      workers_.push_back(std::make_unique<SimWorker>(ctx_, dispatcher_, i));
    for (int i = 0; i < ctx_.params.num_coordinators; ++i)
      coordinators_.push_back(std::make_unique<SimCoordinator>(ctx_, dispatcher_, 1 + i));
    for (int i = 0; i < ctx_.params.num_consumers; ++i)
      consumers_.push_back(std::make_unique<SimConsumer>(ctx_, dispatcher_, i));
  }

  SimResult Run() {
    SimResult result;
    result.seed = options_.seed;
    result.params = ctx_.params.ToString();
    for (int i = 0; i < options_.steps && !invariants_.failed(); ++i, ++result.steps) Step(true);
    Heal();
    bool settled = false;
    for (int i = 0; i < options_.quiesce_steps && !invariants_.failed(); ++i, ++result.steps) {
      Step(false);
      if ((settled = Settled())) break;
    }
    if (!invariants_.failed() && !settled)
      invariants_.Fail("liveness: the healed world did not settle in " +
                       std::to_string(options_.quiesce_steps) + " steps: " + WhatIsLeft());
    if (!invariants_.failed()) {
      dispatcher_.CheckReplay();
      invariants_.Finish(dispatcher_.state());
    }
    result.ok = !invariants_.failed();
    result.failure = invariants_.failure();
    result.journal_records = dispatcher_.journal_size();
    result.restarts = dispatcher_.restarts();
    result.closures = invariants_.num_closures();
    result.splits = invariants_.num_splits_granted();
    result.checks = invariants_.num_checks();
    result.pending_created = invariants_.num_pending_created();
    result.handed_over = invariants_.num_handed_over();
    result.pending_accepted = invariants_.num_pending_accepted();
    result.pending_rejected = invariants_.num_pending_rejected();
    return result;
  }

 private:
  static SimParams DrawParams(uint64_t seed) {
    std::mt19937_64 rng(seed);
    return SimParams::Draw(rng);
  }

  void Step(bool faults) {
    ctx_.net.AdvanceTo(ctx_.net.now_ms() + ctx_.Uniform(1, 10));
    ctx_.net.DeliverDue();
    for (auto& worker : workers_) worker->Step();
    for (auto& coordinator : coordinators_) coordinator->Step();
    for (auto& consumer : consumers_) consumer->Step();
    if (faults && ctx_.Chance(ctx_.params.restart)) {
      dispatcher_.Crash(/*commit_first=*/!ctx_.Chance(ctx_.params.crash_before_commit));
    } else {
      dispatcher_.EndPass();
    }
  }

  void Heal() {
    ctx_.params.loss = 0;
    ctx_.params.duplicate = 0;
    ctx_.params.worker_death = 0;
    ctx_.params.half_open = 0;
    ctx_.params.restart = 0;
    for (auto& worker : workers_) worker->Heal();
    for (auto& coordinator : coordinators_) coordinator->Heal();
    for (auto& consumer : consumers_) consumer->Heal();
  }

  bool Settled() const {
    const state::DispatcherState& state = dispatcher_.state();
    for (const auto& coordinator : coordinators_)
      if (!coordinator->Settled()) return false;
    for (const auto& consumer : consumers_)
      if (!consumer->Settled()) return false;
    for (auto s :
         {state::ClosureState::QUEUED, state::ClosureState::ASSIGNED, state::ClosureState::FINISHED,
          state::ClosureState::FAILED, state::ClosureState::CANCELLED})
      if (state.NumClosuresInState(s) != 0) return false;
    return state.ListUnfinishedJobs().empty();
  }

  std::string WhatIsLeft() const {
    const state::DispatcherState& state = dispatcher_.state();
    std::string left;
    for (auto s :
         {state::ClosureState::QUEUED, state::ClosureState::ASSIGNED, state::ClosureState::FINISHED,
          state::ClosureState::FAILED, state::ClosureState::CANCELLED}) {
      for (const state::Closure* c : state.ClosuresInState(s))
        left +=
            "closure " + std::to_string(c->id) + " (" + c->function_name + ") " +
            state::ClosureStateName(s) +
            (s == state::ClosureState::ASSIGNED ? " to worker " + std::to_string(c->worker_id) +
                                                      " as attempt " + std::to_string(c->attempts)
                                                : std::string()) +
            "; ";
    }
    for (const state::Worker* w : state.ListWorkers()) {
      left += "worker " + std::to_string(w->id) + " at " + w->address + "; ";
    }
    for (const state::Job* job : state.ListUnfinishedJobs())
      left += "job " + std::to_string(job->id) + " unfinished (" +
              std::to_string(job->num_clients) + " clients); ";
    for (const auto& coordinator : coordinators_)
      if (!coordinator->Settled()) left += coordinator->Describe() + "; ";
    for (size_t i = 0; i < consumers_.size(); ++i)
      if (!consumers_[i]->Settled()) left += "consumer " + std::to_string(i) + " busy; ";
    return left.substr(0, 1500);
  }

  SimOptions options_;
  SimContext ctx_;
  std::vector<std::unique_ptr<SimWorker>> workers_;
  SimInvariants invariants_;
  SimDispatcher dispatcher_;
  std::vector<std::unique_ptr<SimCoordinator>> coordinators_;
  std::vector<std::unique_ptr<SimConsumer>> consumers_;
};

}  // namespace

SimResult RunSimulation(const SimOptions& options) {
  World world(options);
  return world.Run();
}

}  // namespace dispatch::sim
