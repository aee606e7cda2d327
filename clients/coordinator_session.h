// CoordinatorSession: a Coordinator's connection to the dispatcher, on the
// coordinator's loop thread. It connects, opens the coordinator id, sends the
// ClosureBook's unsent closures in batched schedule calls (a few in flight),
// keeps one awaitResults long-poll running (which carries the releases), and
// after any failure reconnects with jittered backoff and opens the id again:
// unacknowledged closures go again with the same request ids (the dispatcher
// dedups them) and the new session re-sends every unreleased outcome.
// Invariant: at most one open session; replies of an earlier session never
// touch the schedule accounting of the current one.
#pragma once

#include <kj/async-io.h>
#include <kj/timer.h>
#include <kj/vector.h>

#include <cstdint>
#include <functional>
#include <string>

#include "clients/backoff.h"
#include "clients/closure_book.h"
#include "clients/coordinator_options.h"
#include "clients/dispatcher_connection.h"
#include "common/status.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

struct CoordinatorStatus {
  bool open = false;             // a session is open now
  uint64_t sessions_opened = 0;  // openCoordinator calls that succeeded
  uint64_t dispatcher_incarnation = 0;
  uint64_t dispatcher_restarts = 0;  // incarnation changes seen
  std::string last_error;            // why the latest session ended or failed to open
  // Filled by Coordinator::status() from its ClosureBook (ClosureBook::Counters).
  uint64_t duplicate_outcomes_dropped = 0;  // outcomes reported again, not handed out again
  uint64_t releases_remembered = 0;         // acknowledged releases remembered now
  uint64_t releases_forgotten = 0;          // past max_remembered_releases
};

class CoordinatorSession final : public kj::TaskSet::ErrorHandler {
 public:
  CoordinatorSession(kj::Timer& timer, kj::Network& network, const CoordinatorOptions& options,
                     uint64_t coordinator_id, ClosureBook& book);
  CoordinatorSession(const CoordinatorSession&) = delete;
  CoordinatorSession& operator=(const CoordinatorSession&) = delete;

  // Connects, serves and reconnects forever; drop the promise to stop.
  kj::Promise<void> Run();
  // Sends unsent closures now, as far as the in-flight limit allows.
  void Flush();
  // Sends the pending releases now instead of with the next awaitResults
  // (which may never come: the coordinator is closing). The open session
  // already has its long-poll waiting, so they go through a second,
  // short-lived session; resolves once the dispatcher has applied them.
  kj::Promise<void> ReleaseNow();
  // Resolves once a session is open. Rejects when the dispatcher refused us
  // for good (a wrong token, a malformed address).
  kj::Promise<void> WhenOpen();
  // `call(coordinator)` on an open session; again on the next session when it
  // fails because the connection dropped.
  template <typename T>
  kj::Promise<T> Call(std::function<kj::Promise<T>(rpc::Coordinator::Client)> call) {
    return WhenOpen()
        .then([this, call]() { return call(coordinator_); })
        .then([](T&& value) -> kj::Promise<T> { return kj::mv(value); },
              [this, call](kj::Exception&& e) -> kj::Promise<T> {
                if (e.getType() != kj::Exception::Type::DISCONNECTED) return kj::mv(e);
                return Call<T>(call);
              });
  }

  const CoordinatorStatus& status() const { return status_; }
  // Called on the loop thread after every status change.
  void SetListener(std::function<void(const CoordinatorStatus&)> listener) {
    listener_ = std::move(listener);
  }

 private:
  kj::Promise<void> RunSession();
  kj::Promise<void> AwaitResults(uint64_t generation);
  void EndSession(const kj::Exception& e);
  void taskFailed(kj::Exception&& exception) override;

  kj::Timer& timer_;
  kj::Network& network_;
  const CoordinatorOptions& options_;
  const uint64_t coordinator_id_;
  ClosureBook& book_;
  Backoff backoff_;
  // The dispatchers to try (one, or an HA group); remembers the leader.
  const Result<DispatcherAddresses> addresses_;

  kj::Own<DispatcherConnection> connection_;
  rpc::Coordinator::Client coordinator_;
  bool open_ = false;
  uint64_t generation_ = 0;  // sessions opened so far; the current one's number
  uint64_t incarnation_ = 0;
  CoordinatorStatus status_;
  std::function<void(const CoordinatorStatus&)> listener_;
  uint32_t schedules_in_flight_ = 0;  // of the current session
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> open_waiters_;
  kj::TaskSet tasks_;
};

}  // namespace dispatch::clients
