#include "tests/sim/sim_invariants.h"

#include <cstdio>

#include "state/closure_updates.h"

namespace dispatch::sim {
namespace {

std::string Name(uint64_t closure_id) { return "closure " + std::to_string(closure_id); }

// The closures an update's own items end (failed, finished or cancelled),
// read from the update (the checker's own reading, see the header).
std::vector<uint64_t> ClosuresEndedBy(journal::Update::Reader update) {
  std::vector<uint64_t> ended;
  if (update.isClosureFailed()) {
    ended.push_back(update.getClosureFailed().getClosureId());
  } else if (update.isClosureBatch()) {
    auto batch = update.getClosureBatch();
    if (batch.isCancelled()) {
      for (uint64_t id : batch.getCancelled()) ended.push_back(id);
    } else if (batch.isFinished()) {
      for (auto item : batch.getFinished()) ended.push_back(item.getClosureId());
    }
  }
  return ended;
}

uint64_t NumSplits(const state::DispatcherState& state, uint64_t job_id) {
  const state::Job* job = state.FindJob(job_id);
  const state::Dataset* dataset = job == nullptr ? nullptr : state.FindDataset(job->dataset_id);
  unsigned long long splits = 0;
  if (dataset != nullptr) std::sscanf(dataset->metadata.c_str(), "%llu", &splits);
  return splits;
}

std::string Key(uint64_t job_id, int64_t repetition, uint64_t index) {
  return "split " + std::to_string(index) + " of job " + std::to_string(job_id) + " repetition " +
         std::to_string(repetition);
}

}  // namespace

void SimInvariants::Fail(const std::string& what) {
  if (failure_.empty()) failure_ = what;
}

void SimInvariants::Require(bool ok, const std::function<std::string()>& what) {
  ++checks_;
  if (!ok) Fail(what());
}

void SimInvariants::BeforeCommit(const state::DispatcherState& before,
                                 journal::Update::Reader update) {
  dependants_moved_.clear();
  const std::vector<uint64_t> done = ClosuresEndedBy(update);
  if (!done.empty()) dependants_moved_ = before.WaitingDependants(done);
  if (update.which() != journal::Update::REMOVE_WORKER &&
      update.which() != journal::Update::HAND_OVER_TASK)
    return;
  // RemoveWorker and HandOverTask may requeue outstanding splits: remember
  // the tasks they take from a worker and the requeue lists, to see what
  // they added.
  leaving_tasks_.clear();
  if (update.isHandOverTask()) {
    leaving_tasks_.push_back(update.getHandOverTask().getTaskId());
  } else if (const state::Worker* worker =
                 before.FindWorker(update.getRemoveWorker().getWorkerId())) {
    for (const state::Task* task : before.TasksForWorker(worker->address))
      leaving_tasks_.push_back(task->id);
  }
  requeue_before_.clear();
  for (const state::Job* job : before.ListJobs()) {
    if (!job->requeue_unfinished_splits) continue;
    auto& lists = requeue_before_[job->id];
    for (const auto& provider : job->providers)
      lists.emplace_back(provider.requeued.begin(), provider.requeued.end());
  }
}

void SimInvariants::ForgetHeld(const std::vector<uint64_t>& task_ids) {
  for (uint64_t task_id : task_ids)
    held_.erase(held_.lower_bound({task_id, 0}), held_.upper_bound({task_id, UINT32_MAX}));
}

void SimInvariants::Ended(uint64_t closure_id, state::ClosureState state,
                          const std::string& error) {
  ShadowClosure& closure = closures_[closure_id];
  ended_by_update_.insert(closure_id);
  ++closure.ends;
  Require(closure.ends == 1, [&] { return Name(closure_id) + " ended twice"; });
  closure.state = state;
  closure.error = error;
}

void SimInvariants::AfterCommit(const state::DispatcherState& after,
                                journal::Update::Reader update) {
  ++checks_;
  ended_by_update_.clear();
  CheckUpdate(after, update);
  // Dependants the update ended besides its own items (a failed or
  // cancelled input fails them; a cancel under a first error cancels them).
  for (uint64_t id : dependants_moved_) {
    const state::Closure* closure = after.FindClosure(id);
    if (ended_by_update_.contains(id)) continue;  // one of the update's own items too
    if (closure != nullptr && state::IsClosureDone(closure->state)) {
      if (closure->state == state::ClosureState::CANCELLED) {
        Require(coordinators_with_error_.contains(closure->coordinator_id),
                [&] { return Name(id) + " was cancelled with its input, without a first error"; });
      }
      Ended(id, closure->state, closure->error);
    }
  }
  dependants_moved_.clear();
}

void SimInvariants::CheckUpdate(const state::DispatcherState& after,
                                journal::Update::Reader update) {
  switch (update.which()) {
    case journal::Update::CLOSURE_BATCH: {
      auto batch = update.getClosureBatch();
      switch (batch.which()) {
        case journal::ClosureBatch::SCHEDULED:
          for (auto item : batch.getScheduled()) {
            const uint64_t id = item.getClosureId();
            Require(!closures_.contains(id), [&] { return Name(id) + " scheduled twice"; });
            ShadowClosure& closure = closures_[id];
            closure.coordinator_id = item.getCoordinatorId();
            closure.args = std::string(reinterpret_cast<const char*>(item.getArgs().begin()),
                                       item.getArgs().size());
            closure.deadline_micros = item.getDeadlineMicros();
            for (uint64_t input : item.getInputs()) {
              Require(closures_.contains(input) && input < id, [&] {
                return Name(id) + " names " + Name(input) + " as its input, which is not earlier";
              });
              closure.inputs.push_back(input);
            }
            // Ended at once: an input had failed or was cancelled.
            const state::Closure* now = after.FindClosure(id);
            if (now != nullptr && state::IsClosureDone(now->state)) {
              Require(!closure.inputs.empty(),
                      [&] { return Name(id) + " without inputs ended as it was scheduled"; });
              Ended(id, now->state, now->error);
            }
          }
          break;
        case journal::ClosureBatch::ASSIGNED:
          for (auto item : batch.getAssigned()) {
            ShadowClosure& closure = closures_[item.getClosureId()];
            closure.attempts = item.getAttempt();
            const uint64_t max = policy_.max_closure_attempts;
            Require(max == 0 || closure.attempts <= max + closure.recoveries, [&] {
              return Name(item.getClosureId()) + " runs as attempt " +
                     std::to_string(closure.attempts) + ", over max_closure_attempts " +
                     std::to_string(max) + " (+" + std::to_string(closure.recoveries) +
                     " restarts)";
            });
          }
          break;
        case journal::ClosureBatch::FINISHED:
          for (auto item : batch.getFinished())
            Ended(item.getClosureId(), state::ClosureState::FINISHED, "");
          break;
        case journal::ClosureBatch::CANCELLED:
          for (uint64_t id : batch.getCancelled()) {
            const uint64_t coordinator = closures_[id].coordinator_id;
            Require(coordinators_with_error_.contains(coordinator) || cancel_asked_.contains(id),
                    [&] {
                      return Name(id) + " was cancelled, but coordinator " +
                             std::to_string(coordinator) +
                             " never asked for it nor had a first error";
                    });
            Ended(id, state::ClosureState::CANCELLED, "");
          }
          break;
        case journal::ClosureBatch::RELEASED:
          for (uint64_t id : batch.getReleased()) {
            ShadowClosure& closure = closures_[id];
            Require(closure.ends == 1, [&] { return Name(id) + " released before it ended"; });
            Require(closure.delivered,
                    [&] { return Name(id) + " released before its coordinator got its outcome"; });
            closure.released = true;
          }
          break;
      }
      return;
    }
    case journal::Update::CLOSURE_FAILED: {
      auto failed = update.getClosureFailed();
      const uint64_t id = failed.getClosureId();
      if (failed.getDeadlineExceeded()) {
        const int64_t deadline = closures_[id].deadline_micros;
        Require(deadline != 0 && update.getTimeMicros() >= deadline, [&] {
          return Name(id) + " failed its deadline " + std::to_string(deadline) + " at " +
                 std::to_string(update.getTimeMicros());
        });
      } else if (!failed.getInfrastructure()) {
        coordinators_with_error_.insert(closures_[id].coordinator_id);
      }
      Ended(id, state::ClosureState::FAILED, failed.getError());
      return;
    }
    case journal::Update::CREATE_PENDING_TASK:
      ++pending_created_;
      return;
    case journal::Update::CLIENT_HEARTBEAT:
      ++(update.getClientHeartbeat().getOutcome().isAccepted() ? pending_accepted_
                                                               : pending_rejected_);
      return;
    case journal::Update::PRODUCE_SPLIT: {
      auto produce = update.getProduceSplit();
      const uint64_t job = produce.getJobId();
      const int64_t rep = produce.getRepetition();
      // The task's previous grant is consumed; this one is held.
      const std::pair<uint64_t, uint32_t> holder{produce.getTaskId(), produce.getProviderIndex()};
      held_.erase(holder);
      if (after.FindJob(job)->requeue_unfinished_splits && produce.getSplitIndices().size() > 0) {
        auto& held = held_[holder];
        for (uint64_t index : produce.getSplitIndices()) held.push_back(index);
      }
      for (uint64_t index : produce.getSplitIndices()) {
        const SplitKey key{job, rep, index};
        ++splits_granted_;
        Require(++granted_[key] <= 1 + requeued_[key], [&] {
          return Key(job, rep, index) + " was granted " + std::to_string(granted_[key]) +
                 " times and requeued " + std::to_string(requeued_[key]) + " times";
        });
      }
      if (produce.getEndOfSplits()) {
        const uint64_t n = NumSplits(after, job);
        for (uint64_t index = 0; index < n; ++index) {
          Require(granted_[{job, rep, index}] >= 1, [&] {
            return Key(job, rep, index) + " was never granted, yet the repetition ended";
          });
        }
      }
      return;
    }
    case journal::Update::FINISH_TASK:
      ForgetHeld({update.getFinishTask().getTaskId()});
      return;
    case journal::Update::REMOVE_TASK:
      ForgetHeld({update.getRemoveTask().getTaskId()});
      return;
    case journal::Update::GARBAGE_COLLECT_JOB: {
      // A collected job's splits go with it.
      std::vector<uint64_t> tasks;
      for (const auto& [holder, indices] : held_) {
        const state::Task* task = after.FindTask(holder.first);
        if (task == nullptr || task->job_id == update.getGarbageCollectJob().getJobId())
          tasks.push_back(holder.first);
      }
      ForgetHeld(tasks);
      return;
    }
    case journal::Update::REMOVE_WORKER:
    case journal::Update::HAND_OVER_TASK: {
      if (update.isHandOverTask()) ++handed_over_;
      std::map<uint64_t, std::multiset<uint64_t>> added;  // job -> requeued by this update
      for (const auto& [job_id, lists] : requeue_before_) {
        const state::Job* job = after.FindJob(job_id);
        for (size_t p = 0; p < lists.size(); ++p) {
          const auto& requeued = job->providers[p].requeued;
          for (size_t i = lists[p].size(); i < requeued.size(); ++i) {
            ++requeued_[{job_id, job->providers[p].repetition, requeued[i]}];
            added[job_id].insert(requeued[i]);
          }
        }
      }
      requeue_before_.clear();
      for (uint64_t task_id : leaving_tasks_) {
        const uint64_t job_id = after.FindTask(task_id)->job_id;
        for (auto it = held_.lower_bound({task_id, 0});
             it != held_.end() && it->first.first == task_id; ++it) {
          for (uint64_t index : it->second) {
            auto& requeued = added[job_id];
            auto found = requeued.find(index);
            Require(found != requeued.end(), [&] {
              return "split " + std::to_string(index) + " of job " + std::to_string(job_id) +
                     ", held by task " + std::to_string(task_id) + ", was lost by " +
                     (update.isHandOverTask() ? "its hand-over" : "its worker's removal") +
                     " although the job requeues";
            });
            if (found != requeued.end()) requeued.erase(found);
          }
        }
      }
      ForgetHeld(leaving_tasks_);
      leaving_tasks_.clear();
      return;
    }
    default:
      return;
  }
}

void SimInvariants::Assigned(const state::DispatcherState& state, const state::ClosureRun& run) {
  const state::Closure* closure = state.FindClosure(run.closure_id);
  const state::Worker* worker = state.FindWorker(run.worker_id);
  if (closure == nullptr || worker == nullptr) {
    Fail(Name(run.closure_id) + " assigned to worker " + std::to_string(run.worker_id) +
         ", but one of them is unknown");
    return;
  }
  auto functions = functions_of_(worker->address, worker->incarnation);
  // NeededFunctions returns views into `kind`: it must outlive them.
  const state::ClosureKind kind{closure->function_name, closure->resources};
  const auto needed = state::NeededFunctions(state, kind);
  Require(functions != nullptr && state::CanRun(*functions, needed), [&] {
    std::string have;
    if (functions)
      for (auto& f : *functions) have += f + ",";
    return Name(run.closure_id) + " of function " + closure->function_name + " (worker has " +
           (functions ? have : std::string("no process")) + ")" + " was assigned to worker " +
           std::to_string(run.worker_id) + " at " + worker->address + ", which did not register it";
  });
  const uint64_t max = policy_.max_closure_attempts;
  auto shadow = closures_.find(run.closure_id);  // absent while its schedule is uncommitted
  const uint32_t recoveries = shadow == closures_.end() ? 0 : shadow->second.recoveries;
  Require(max == 0 || run.attempt <= max + recoveries, [&] {
    return Name(run.closure_id) + " assigned as attempt " + std::to_string(run.attempt) +
           ", over max_closure_attempts " + std::to_string(max);
  });
}

std::string SimInvariants::ExpectedResult(uint64_t closure_id) const {
  const ShadowClosure& closure = closures_.at(closure_id);
  std::vector<std::string> inputs;
  for (uint64_t input : closure.inputs) inputs.push_back(ExpectedResult(input));
  return ClosureResult(closure.args, inputs);
}

void SimInvariants::CancelAsked(const std::vector<uint64_t>& closure_ids) {
  cancel_asked_.insert(closure_ids.begin(), closure_ids.end());
}

void SimInvariants::PassPlanned(const state::DispatcherState& before,
                                const std::vector<state::LiveWorker>& workers,
                                const std::vector<state::ClosureRun>& runs) {
  if (runs.empty()) return;
  // Order of the queue: higher priority first, then earlier position.
  auto first = [](const state::Closure& a, const state::Closure& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.queue_position < b.queue_position;
  };
  std::set<uint64_t> taken;
  for (const state::ClosureRun& run : runs) taken.insert(run.closure_id);
  for (const state::LiveWorker& worker : workers) {
    // The last (in queue order) closure the pass gave this worker.
    const state::Closure* last = nullptr;
    for (const state::ClosureRun& run : runs) {
      if (run.worker_id != worker.worker_id) continue;
      const state::Closure* closure = before.FindClosure(run.closure_id);
      if (closure != nullptr && (last == nullptr || first(*last, *closure))) last = closure;
    }
    if (last == nullptr) continue;
    for (const state::Closure* left : before.ClosuresInState(state::ClosureState::QUEUED)) {
      if (taken.contains(left->id) || !first(*left, *last)) continue;
      const state::ClosureKind kind{left->function_name, left->resources};
      if (!state::CanRun(*worker.functions, state::NeededFunctions(before, kind))) continue;
      Fail("the assignment pass gave worker " + std::to_string(worker.worker_id) + " " +
           Name(last->id) + " (priority " + std::to_string(last->priority) + ") but left " +
           Name(left->id) + " (priority " + std::to_string(left->priority) +
           ", queued before) that it could run");
      return;
    }
    ++checks_;
  }
}

void SimInvariants::Restarted(const state::DispatcherState& recovered) {
  for (const state::Closure* closure : recovered.ClosuresInState(state::ClosureState::ASSIGNED))
    ++closures_[closure->id].recoveries;
}

void SimInvariants::RoundRobinTaskStarted(uint64_t job_client_id, uint64_t task_id,
                                          int64_t starting_round, int64_t consumer_round) {
  Require(consumer_round <= starting_round, [&] {
    return "round-robin task " + std::to_string(task_id) + " starts at round " +
           std::to_string(starting_round) + ", but job client " + std::to_string(job_client_id) +
           " had read on to round " + std::to_string(consumer_round);
  });
}

void SimInvariants::SplitAnswered(uint64_t job_id, uint64_t task_id, uint64_t sequence,
                                  const SplitReply& reply) {
  auto [it, inserted] = answers_.try_emplace({task_id, sequence}, reply);
  if (!inserted) {
    Require(it->second == reply, [&] {
      return "getSplit of task " + std::to_string(task_id) + " sequence " +
             std::to_string(sequence) + " was answered twice, differently";
    });
    return;
  }
  for (uint64_t index : reply.indices) {
    const SplitKey key{job_id, reply.repetition, index};
    Require(++received_[key] <= 1 + requeued_[key], [&] {
      return Key(job_id, reply.repetition, index) + " reached workers " +
             std::to_string(received_[key]) + " times and was requeued " +
             std::to_string(requeued_[key]) + " times";
    });
  }
}

void SimInvariants::OutcomeDelivered(uint64_t coordinator_id, const Outcome& outcome) {
  const uint64_t id = outcome.closure_id;
  auto it = closures_.find(id);
  if (it == closures_.end()) {
    Fail("coordinator " + std::to_string(coordinator_id) + " got the outcome of " + Name(id) +
         ", which was never scheduled (committed)");
    return;
  }
  ShadowClosure& closure = it->second;
  Require(closure.coordinator_id == coordinator_id, [&] {
    return "coordinator " + std::to_string(coordinator_id) + " got the outcome of " + Name(id) +
           " of coordinator " + std::to_string(closure.coordinator_id);
  });
  Require(closure.ends == 1,
          [&] { return Name(id) + "'s outcome was delivered before its end committed"; });
  Require(outcome.state == closure.state, [&] {
    return Name(id) + " was delivered as " + state::ClosureStateName(outcome.state) +
           " but journaled as " + state::ClosureStateName(closure.state);
  });
  if (outcome.state == state::ClosureState::FINISHED) {
    Require(outcome.result == ExpectedResult(id),
            [&] { return Name(id) + " was delivered with the wrong result " + outcome.result; });
  }
  if (outcome.state == state::ClosureState::FAILED) {
    Require(outcome.error == closure.error,
            [&] { return Name(id) + " was delivered with another error"; });
  }
  closure.delivered = true;
}

void SimInvariants::Finish(const state::DispatcherState& final_state) {
  for (const auto& [id, closure] : closures_) {
    Require(closure.ends == 1, [&] {
      const state::Closure* c = final_state.FindClosure(id);
      return "liveness: " + Name(id) + " never ended (it is " +
             (c == nullptr ? std::string("gone") : state::ClosureStateName(c->state)) + ")";
    });
    Require(closure.delivered, [&] {
      return "liveness: " + Name(id) + "'s outcome never reached coordinator " +
             std::to_string(closure.coordinator_id);
    });
    Require(closure.released, [&] { return "liveness: " + Name(id) + " was never released"; });
  }
}

}  // namespace dispatch::sim
