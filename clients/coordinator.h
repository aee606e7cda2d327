// Coordinator: the client side of closure coordination (the reference's
// ClusterCoordinator), embeddable in any program. It runs its own thread and
// libuv loop (a LoopThread driving a CoordinatorSession); every public
// method is thread-safe.
// Schedule() returns at once unless `max_unacknowledged` closures are still
// on their way to a dispatcher that applies back-pressure; Join() and Fetch()
// block by design; Done() and CreatePerWorkerResource() wait one round trip.
// The coordinator's first error (a closure failed) is returned by exactly one
// of the next Schedule / Join / Done, then cleared. A dropped connection or a
// dispatcher restart is survived: the session is reopened under the same id.
#pragma once

#include <kj/async.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "clients/closure_book.h"
#include "clients/coordinator_options.h"
#include "clients/coordinator_session.h"
#include "clients/remote_value.h"
#include "common/status.h"
#include "clients/loop_thread.h"

namespace dispatch::clients {

class Coordinator {
 public:
  // Starts the coordinator's thread and waits until its first session is
  // open. InvalidArgument for bad options; Unauthenticated for a refused
  // token; Unavailable when no session opened within connect_timeout_ms.
  static Result<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options);
  // Close().
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  uint64_t id() const { return coordinator_id_; }

  // Queues function(args) (with this worker's components of `resources`).
  // Returns the coordinator's pending first error instead, once.
  // InvalidArgument for an empty function name.
  Result<RemoteValue> Schedule(std::string function, std::string args,
                               ScheduleOptions options);
  Result<RemoteValue> Schedule(std::string function, std::string args = "",
                               std::vector<ResourceId> resources = {}) {
    ScheduleOptions options;
    options.resources = std::move(resources);
    return Schedule(std::move(function), std::move(args), std::move(options));
  }
  // Waits until none of this coordinator's closures is waiting, queued or running,
  // and every RemoteValue still held has its outcome (ClosureBook::WaitHeldOutcomes).
  // Returns the first error instead when there is one (once).
  Status Join();
  // Whether none is queued or running now (or the first error, once).
  Result<bool> Done();
  // Every worker builds its own component with function(args) (a closure
  // function registered on the workers).
  Result<ResourceId> CreatePerWorkerResource(std::string function, std::string args = "");
  // A handle on a closure of this coordinator id, scheduled by this or an
  // earlier Coordinator (even in another process). Fetch() of an id the
  // dispatcher does not know (never scheduled, or already released) fails
  // NotFound.
  RemoteValue Attach(uint64_t closure_id);
  // Cancels these closures of the coordinator (Coordinator.cancel, at most
  // max_schedule_batch ids per call, each call all or nothing): per id, its
  // status after the call: kCancelled (now or before), or kReady / kFailed
  // for one that had finished or failed (left as it is). NotFound naming an
  // id the dispatcher does not know. RemoteValue::Cancel() cancels one.
  Result<std::vector<RemoteValueStatus>> Cancel(const std::vector<uint64_t>& closure_ids);

  CoordinatorStatus status() const;

  // Sends the releases of fetched closures that are still pending (waiting
  // up to 2 s), then stops the thread; pending Fetch() calls return
  // Unavailable. Idempotent.
  // REQUIRES: not on the coordinator's thread.
  void Close();

 private:
  class Loop;  // the loop thread's objects
  class Canceller;  // RemoteValue::Cancel()'s way in, while this is open
  // Plain KJ types: it travels through a kj::Promise.
  struct JoinReply {
    bool done = false;
    uint64_t error_closure_id = 0;  // 0: no error
    kj::String error_message;
    Status error() const;
  };

  Coordinator(CoordinatorOptions options, uint64_t coordinator_id);
  // Starts the loop thread and builds its objects there.
  Status Start();
  void RequestFlush();
  // Runs `start` on the loop thread and waits for the promise it returns.
  template <typename T>
  Result<T> RunOnLoop(std::function<kj::Promise<T>(Loop&)> start);
  Result<JoinReply> CallJoin(bool wait);
  // Asks the dispatcher whether it holds a first error for us (after a
  // failed outcome arrived), returning it.
  Status CheckFirstError();

  const CoordinatorOptions options_;
  const uint64_t coordinator_id_;
  std::shared_ptr<ClosureBook> book_;
  std::shared_ptr<Canceller> canceller_;
  std::atomic<bool> flush_posted_{false};

  mutable std::mutex mu_;  // guards status_
  CoordinatorStatus status_;
  // Loop thread only: set by the setup, valid in every posted function
  // (none runs after the Loop is gone).
  Loop* loop_ = nullptr;
  LoopThread loop_thread_{"coordinator"};  // declared last: stopped first
};

}  // namespace dispatch::clients
