// The simulated clients: worker processes (heartbeats with their functions,
// closures run and reported, DYNAMIC tasks reading splits, deaths and new
// processes at the same address or new workers at fresh addresses),
// coordinators (schedule with request ids,
// resend on a broken connection, await and release outcomes, join) and
// data-service consumers (datasets, jobs, client heartbeats, release; an
// anonymous OFF job is sometimes round robin, read a round a step, blocking
// where the dispatcher says a pending task is to start). Each
// acts in Step() when the runner gives it a turn; Heal() ends its faults for
// the liveness phase. They talk to the SimDispatcher only through the
// network (SimContext::Send), so every message may be late, lost or twice.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/sim/sim_context.h"
#include "tests/sim/sim_dispatcher.h"
#include "tests/sim/sim_messages.h"

namespace dispatch::sim {

class SimWorker {
 public:
  SimWorker(SimContext& ctx, SimDispatcher& dispatcher, int index);
  void Step();
  // Comes back (or is replaced) as a process with every function, and dies
  // no more.
  void Heal();
  bool healed() const { return healed_; }
  const std::string& address() const { return address_; }
  // Whether any of its processes used `address` (it moves on when it comes
  // back at a fresh address).
  bool HadAddress(const std::string& address) const;
  // The functions of the process with `incarnation` (dead or alive).
  std::shared_ptr<const state::FunctionSet> FunctionsOf(uint64_t incarnation) const;

 private:
  struct Run {
    uint64_t worker_id = 0;
    uint32_t attempt = 0;
    int64_t done_at = 0;
    std::string args;
    std::vector<std::string> inputs;
    uint64_t conn = 0;  // pushed on; an outcome of an earlier connection is dropped
  };
  struct TaskRun {
    TaskInfo info;
    uint64_t next_sequence = 0;
    int64_t repetition = 0;
    bool waiting = false;
    bool done = false;  // finished: reported until the dispatcher deletes it
    int64_t next_at = 0;
  };
  void Start(bool all_functions);
  void Die();
  void Heartbeat();
  void OnPush(uint64_t conn, const std::vector<RunPush>& runs);
  void ReportDone();
  void WorkTasks();
  void AskSplit(uint64_t task_id, TaskRun& task);
  void OnSplit(uint64_t conn, uint64_t task_id, uint64_t sequence, const SplitReply& reply);

  SimContext& ctx_;
  SimDispatcher& dispatcher_;
  const std::string name_;  // "w<index>": its first address, the stem of the later ones
  std::string address_;
  std::set<std::string> addresses_;
  int moves_ = 0;
  bool alive_ = false;
  bool healed_ = false;
  int64_t revive_at_ = 0;
  uint64_t incarnation_ = 0;
  std::map<uint64_t, std::shared_ptr<const state::FunctionSet>> functions_;  // by incarnation
  uint32_t slots_ = 1;
  uint64_t conn_ = 0;
  uint64_t first_sequence_ = 1;
  int64_t next_heartbeat_ = 0;
  std::map<uint64_t, Run> runs_;  // by closure id
  std::map<uint64_t, TaskRun> tasks_;
};

class SimCoordinator {
 public:
  SimCoordinator(SimContext& ctx, SimDispatcher& dispatcher, uint64_t coordinator_id);
  void Step();
  void Heal() { healed_ = true; }
  // Nothing left to schedule, to hear of or to release.
  bool Settled() const;
  uint64_t coordinator_id() const { return id_; }
  size_t num_outcomes() const { return outcomes_.size(); }
  // What it waits for, for a liveness failure's message.
  std::string Describe() const;

 private:
  void Connect();
  void SendSchedule(std::vector<ClosureSpec> specs);
  void OnScheduled(const std::vector<ClosureSpec>& specs, const ScheduleReply& reply);
  void OnOutcomes(uint64_t conn, const std::vector<Outcome>& outcomes,
                  const std::vector<uint64_t>& released);
  ClosureSpec NewSpec(const std::vector<ClosureSpec>& earlier_in_call);
  void MaybeCancel();
  // The spec left unacknowledged_ (acknowledged or refused): its inputs may
  // be released again.
  void Unpin(const ClosureSpec& spec);

  SimContext& ctx_;
  SimDispatcher& dispatcher_;
  const uint64_t id_;
  bool healed_ = false;
  uint64_t conn_ = 0;
  uint64_t next_request_id_ = 1;
  int scheduled_ = 0;
  std::map<uint64_t, ClosureSpec> unacknowledged_;  // by request id
  std::map<uint64_t, int64_t> sent_at_;             // by request id
  std::map<uint64_t, uint64_t> acknowledged_;       // request id -> closure id
  std::map<uint64_t, Outcome> outcomes_;            // by closure id
  std::set<uint64_t> to_release_;
  // Closures named as inputs by a schedule not acknowledged yet: not
  // released until it is (a released input is NotFound).
  std::multiset<uint64_t> pinned_inputs_;
  std::set<uint64_t> used_as_input_;  // closure ids named as inputs (not in-call ones)
  // Releases whose awaitResults reply arrived (acknowledged): the wire
  // promises none of them is reported again, restarts included.
  std::set<uint64_t> release_acknowledged_;
  bool awaiting_ = false;
  int64_t next_poll_ = 0;
};

class SimConsumer {
 public:
  SimConsumer(SimContext& ctx, SimDispatcher& dispatcher, int index);
  void Step();
  void Heal() { healed_ = true; }
  bool Settled() const { return healed_ && client_id_ == 0 && !waiting_; }

 private:
  void Heartbeat();
  // A heartbeat's answer for a round-robin job: tasks it starts reading, and
  // where to block.
  void OnRounds(const ClientHeartbeatReply& reply);

  SimContext& ctx_;
  SimDispatcher& dispatcher_;
  const int index_;
  bool healed_ = false;
  uint64_t conn_ = 0;
  uint64_t dataset_id_ = 0;
  uint64_t client_id_ = 0;
  bool waiting_ = false;
  int jobs_ = 0;
  int64_t next_at_ = 0;
  int64_t release_at_ = 0;
  int64_t stalled_until_ = 0;  // a consumer that stops heartbeating a while
  // Round robin (its client's job is, with this consumer as its only one).
  bool round_robin_ = false;
  int64_t round_ = 0;      // the round it reads
  int64_t block_ = -1;     // where the dispatcher said to wait; -1: nowhere
  bool answered_ = false;  // a heartbeat of this client was answered
  std::set<uint64_t> known_tasks_;
  uint64_t beats_ = 0;  // heartbeats sent: an answer to an earlier one is stale
};

}  // namespace dispatch::sim
