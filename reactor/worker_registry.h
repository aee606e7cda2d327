// WorkerRegistry: the live side of registered workers: the WorkerControl
// capability each handed us over the connection it is attached to, and task
// pushes, which wait for the commit of what they announce, never block the
// loop, are limited per worker, and are redone when a worker that missed one
// comes back. Which connection a worker is attached to and when it was last
// heard from is soft state the planners read (state/worker_liveness.h): the
// registry keeps it in step with the capabilities, and removes workers
// (journaled) when their connection drops or they time out.
// REQUIRES: loop thread only.
#pragma once

#include <kj/async.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "reactor/data_service_options.h"
#include "reactor/durable_state.h"
#include "reactor/rpc_server.h"
#include "reactor/serving_clock.h"
#include "schema/dispatcher.capnp.h"
#include "state/soft_state.h"

namespace dispatch::reactor {

struct WorkerRegistryStats {
  uint64_t pushes_sent = 0;
  uint64_t pushes_failed = 0;
  uint64_t pushes_deferred = 0;  // over the in-flight limit: left to the heartbeat
  uint64_t removed_disconnected = 0;
  uint64_t removed_timed_out = 0;
  uint64_t heartbeats = 0;  // worker heartbeats of registered workers
};

class WorkerRegistry {
 public:
  // Pushes one worker may have unanswered; more wait for its next attachment
  // (and its heartbeat replies list the tasks anyway).
  static constexpr uint32_t kMaxPushesInFlight = 64;

  // `soft` is DataService's; it outlives the registry, which keeps its
  // workers' liveness and records the absences its removals start.
  WorkerRegistry(const ServingClock& clock, state::SoftState& soft, DurableState& durable,
                 const DataServiceOptions& options);
  ~WorkerRegistry();
  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;

  // The registered worker at `address` heartbeated and the soft state
  // recorded it (SoftState::Apply of a heartbeat plan), saying whether it
  // `attached` anew to its connection (first heartbeat since it registered,
  // reconnected or the dispatcher restarted); it sent its control capability
  // when `has_control`. An attachment starts without a control capability
  // (one of an earlier connection is dropped) until a heartbeat brings one.
  void Heartbeat(const std::string& address, bool attached, bool has_control,
                 rpc::WorkerControl::Client control);

  // A connection is gone: every worker attached to it is removed.
  void OnDisconnect(RpcServer::ConnectionId connection);
  // Removes every worker not heard from within the worker timeout.
  void CheckTimeouts();
  // Forgets the worker's liveness and capability, puts back its closures and
  // journals RemoveWorker; its address's grace period starts.
  Status Remove(std::string_view address, const char* reason);

  // Announces tasks (startTasks) / withdraws them (deleteTasks) once the
  // current pass has committed. Tasks that no longer exist are skipped.
  void PushStartTasks(const std::string& address, std::vector<uint64_t> task_ids);
  void PushDeleteTasks(const std::string& address, std::vector<uint64_t> task_ids);

  bool IsConnected(std::string_view address) const;
  // The control capability of the attached worker at `address`; null when
  // none. Valid until the registry next changes: use it at once.
  rpc::WorkerControl::Client* ControlOf(std::string_view address);
  // Told by Remove before the removal is carried (state::PlanWorkerRemoval):
  // nothing is assigned to the worker from then on.
  void SetWorkerLostHandler(std::function<void(uint64_t worker_id)> h) {
    on_worker_lost_ = std::move(h);
  }
  // Told by Remove after a removal was carried.
  void SetWorkerRemovedHandler(std::function<void()> h) { on_worker_removed_ = std::move(h); }
  // Wall-clock micros of the last heartbeat; 0 when none since start.
  int64_t LastHeartbeatMicros(std::string_view address) const {
    return liveness_.LastHeartbeatMicros(address);
  }
  const WorkerRegistryStats& stats() const { return stats_; }

 private:
  // The link of a worker heard from since start (its liveness is in
  // liveness_; an entry goes with the worker's removal).
  struct Entry {
    kj::Maybe<rpc::WorkerControl::Client> control;
    uint64_t generation = 0;  // bumped on every (re)attachment
    uint32_t pushes_in_flight = 0;
  };
  class ErrorHandler final : public kj::TaskSet::ErrorHandler {
   public:
    void taskFailed(kj::Exception&& exception) override;
  };

  kj::Promise<void> SendStart(std::string address, std::vector<uint64_t> task_ids);
  kj::Promise<void> SendDelete(std::string address, std::vector<uint64_t> task_ids);
  void RetryLater(const std::string& address, const std::vector<uint64_t>& task_ids);
  // The push sent to the entry of `generation` at `address` got its answer.
  void PushDone(const std::string& address, uint64_t generation);

  const ServingClock& clock_;  // timeouts
  state::SoftState& soft_;
  state::WorkerLiveness& liveness_;  // soft_'s
  DurableState& durable_;
  const DataServiceOptions& options_;
  std::map<std::string, Entry, std::less<>> entries_;
  // Start pushes that failed, by worker address: redone when it is back.
  std::map<std::string, std::set<uint64_t>, std::less<>> unpushed_;
  WorkerRegistryStats stats_;
  std::function<void(uint64_t)> on_worker_lost_;
  std::function<void()> on_worker_removed_;
  ErrorHandler error_handler_;
  kj::TaskSet pushes_;
};

}  // namespace dispatch::reactor
