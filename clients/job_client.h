// JobClient: a consumer's hold on one job. It creates or joins the job
// (getOrCreateJob), heartbeats on an interval (clientHeartbeat) to keep its
// job client alive and follow the task list (re-read only when the dispatcher
// says it changed, and in full after a dispatcher restart), passes round-robin
// rounds through, and releases its job client on Close(). Runs on the
// caller's KJ loop (a uvkj loop in this project); not thread-safe.
#pragma once

#include <kj/async.h>
#include <kj/timer.h>
#include <kj/vector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "clients/reconnecting_connection.h"
#include "clients/task_description.h"
#include "common/status.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

struct JobOptions {
  uint64_t dataset_id = 0;
  rpc::ProcessingMode processing_mode = rpc::ProcessingMode::OFF;
  std::string job_name;  // empty: an anonymous job (always new)
  int64_t job_name_index = 0;
  uint32_t num_consumers = 0;  // > 0: round robin across that many consumers
  rpc::TargetWorkers target_workers = rpc::TargetWorkers::AUTO;
  bool requeue_unfinished_splits = false;
  uint32_t heartbeat_interval_ms = 1000;
};

class JobClient {
 public:
  // Creates or joins the job and starts heartbeating (the first heartbeat
  // goes at once). Rejects with the dispatcher's error (for example a named
  // job reused with another processing mode).
  // On one connection: a dropped connection stops the heartbeats (status()
  // says Unavailable).
  static kj::Promise<kj::Own<JobClient>> Create(rpc::Dispatcher::Client dispatcher,
                                                kj::Timer& timer, JobOptions options);
  // Through `connection`, which must outlive the JobClient: a dropped
  // connection is made again and the heartbeats go on with the same job
  // client (which a fault-tolerant dispatcher keeps across restarts).
  static kj::Promise<kj::Own<JobClient>> Create(ReconnectingConnection& connection,
                                                kj::Timer& timer, JobOptions options);

  JobClient(rpc::Dispatcher::Client dispatcher, kj::Maybe<ReconnectingConnection&> reconnecting,
            kj::Timer& timer, JobOptions options, uint64_t job_id, uint64_t job_client_id,
            uint64_t incarnation);
  // Stops heartbeating. Does not release the job client: call Close() first.
  ~JobClient() = default;
  JobClient(const JobClient&) = delete;
  JobClient& operator=(const JobClient&) = delete;

  uint64_t job_id() const { return job_id_; }
  uint64_t job_client_id() const { return job_client_id_; }
  // The latest task list, as of the last heartbeat that carried one.
  const std::vector<TaskDescription>& tasks() const { return tasks_; }
  uint64_t task_list_version() const { return known_version_; }
  bool job_finished() const { return job_finished_; }
  // Round robin: the round consumers should block at until the front pending
  // task is accepted; -1 when none.
  int64_t block_round() const { return block_round_; }
  uint64_t dispatcher_incarnation() const { return incarnation_; }
  // Ok, or the error that stopped the heartbeats (unknown job client after a
  // restart without fault tolerance, job garbage-collected, connection lost).
  const Status& status() const { return status_; }
  uint64_t heartbeats() const { return heartbeats_; }
  // Heartbeat replies that carried a changed task list.
  uint64_t task_list_reads() const { return task_list_reads_; }

  // Round robin: the consumer's current round and the round it is blocked
  // at (-1: none), sent with every following heartbeat.
  void SetRounds(int64_t current_round, int64_t blocked_round);
  // Sends a heartbeat now; resolves once its reply is applied.
  kj::Promise<void> HeartbeatNow();
  // Resolves at the next task-list change, job finish, or heartbeat-stopping error.
  kj::Promise<void> WhenChanged();
  // Stops heartbeating and releases the job client. Idempotent.
  kj::Promise<void> Close();

 private:
  kj::Promise<void> Loop();
  kj::Promise<void> Beat();
  void Apply(rpc::ClientHeartbeatResponse::Reader response);
  void Fail(const kj::Exception& e, uint64_t generation);
  rpc::Dispatcher::Client Dispatcher();
  void NotifyChanged();

  rpc::Dispatcher::Client dispatcher_;
  kj::Maybe<ReconnectingConnection&> reconnecting_;
  kj::Timer& timer_;
  const JobOptions options_;
  const uint64_t job_id_;
  const uint64_t job_client_id_;
  uint64_t incarnation_;
  uint64_t known_version_ = 0;
  std::vector<TaskDescription> tasks_;
  bool job_finished_ = false;
  int64_t block_round_ = -1;
  uint64_t sent_generation_ = 0;  // the connection the heartbeat in flight went out on
  Status status_;
  bool closed_ = false;
  uint64_t heartbeats_ = 0;
  uint64_t task_list_reads_ = 0;
  int64_t current_round_ = -1;
  int64_t blocked_round_ = -1;
  bool beat_requested_ = false;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> wake_;
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> beat_waiters_;
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> change_waiters_;
  kj::Promise<void> loop_ = nullptr;  // declared last: cancelled first
};

}  // namespace dispatch::clients
