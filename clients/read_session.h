// ReadSession: the loop-thread side of a consumer: registers the dataset, opens
// the job client, follows the task list and reads every task from its worker
// (one stream per task, each call acknowledging the previous reply of its
// lane; round robin: one element per round from the task the round falls on).
// Elements go to an ElementSink. Not thread-safe.
#pragma once

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/timer.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "clients/backoff.h"
#include "clients/dataset_client.h"
#include "clients/job_client.h"
#include "clients/reconnecting_connection.h"
#include "common/status.h"
#include "schema/data_transfer.capnp.h"

namespace dispatch::clients {

struct Element {
  std::string data;
  uint64_t task_id = 0;
  int64_t round = -1;  // round robin: the round it belongs to
};

struct ReaderOptions {
  // "tcp:HOST:PORT" or "unix:PATH", or a comma-separated list of them (an HA
  // group: the client finds the leader, clients/dispatcher_addresses.h).
  std::string dispatcher_address;
  std::string token;
  DatasetSpec dataset;          // registered (idempotently) unless dataset_id is set
  uint64_t dataset_id = 0;      // nonzero: an already registered dataset
  JobOptions job;               // processing mode, job name, consumers, heartbeat interval
  int64_t consumer_index = -1;  // round robin (job.num_consumers > 0): this consumer, else -1
  size_t max_buffered_elements = 1 << 16;  // read ahead, at most
  uint64_t max_buffered_bytes = 64 << 20;
  uint32_t max_elements_per_call = 4096;
  // About this many bytes per reply (capped at 32 MiB). Measured with
  // `dispatch-bench read --batch-kib`: 1 MiB replies carry 10 KiB elements
  // about twice as fast as 16 MiB ones, 1 MiB elements about a third faster,
  // and the first element comes sooner. (Likely cause: the consumer copies
  // each byte twice, kernel to message and message to element, and a small
  // reply is still in cache for the second copy.) 512 KiB to 2 MiB measure
  // alike; 100 B elements are bound by max_elements_per_call instead.
  uint64_t max_bytes_per_call = 1 << 20;
  uint32_t wait_ms = 1000;                 // a call may wait this long at the worker
  uint32_t calls_per_task = 2;             // getElements calls in flight per task (1..16)
  uint64_t seed = 0;                       // consumer ids and backoff jitter; 0: random
};

// InvalidArgument naming the first bad field.
Status ValidateReaderOptions(const ReaderOptions& options);

// The elements of one getElements reply. Small ones are read where they lie:
// `elements` point into `reply`, and DatasetReader::Next() copies each into
// the caller's Element, so no element costs an allocation. Large ones (4 KiB
// or more on average) are copied into `owned` on the loop thread as the
// reply arrives, while the kernel's copy is still in cache, and the reply is
// dropped at once; Next() swaps each into the caller's Element (measured
// with `dispatch-bench read`: copying 1 MiB elements out of replies held
// for the caller cost the consumer twice the CPU per element).
// REQUIRES: `reply` is destroyed on the loop thread (its release talks to
// the RPC connection); other threads may read the bytes while it lives.
struct ElementBatch {
  kj::Own<capnp::Response<rpc::WorkerData::GetElementsResults>> reply;
  std::vector<kj::ArrayPtr<const kj::byte>> elements;  // into reply
  std::vector<std::string> owned;                      // or copies, without a reply
  size_t count = 0;    // elements in the batch
  uint64_t bytes = 0;  // sum of the elements' sizes
  uint64_t task_id = 0;
  int64_t round = -1;  // round robin: the round it belongs to
};

// Replies whose elements average this many bytes or more are copied out.
inline constexpr uint64_t kOwnedElementBytes = 4096;

// A batch of the READY reply `reply` of task `task_id`.
ElementBatch BatchOfReply(capnp::Response<rpc::WorkerData::GetElementsResults>&& reply,
                          uint64_t task_id, int64_t round);

// Where a session puts what it reads. Called on the loop thread.
class ElementSink {
 public:
  virtual ~ElementSink() noexcept(false) = default;
  virtual void Opened(uint64_t job_id, uint64_t job_client_id) = 0;
  // Takes the batch; false when the sink is full (wait on WhenRoom()).
  virtual bool Push(ElementBatch&& batch) = 0;
  virtual kj::Promise<void> WhenRoom() = 0;
  virtual void End() = 0;
  virtual void Fail(const Status& status) = 0;
};

class ReadSession final : private kj::TaskSet::ErrorHandler {
 public:
  ReadSession(kj::Network& network, kj::Timer& timer, const ReaderOptions& options,
              ElementSink& sink);
  ~ReadSession() noexcept(false);
  ReadSession(const ReadSession&) = delete;
  ReadSession& operator=(const ReadSession&) = delete;

  // Opens the job and reads until the end of the sequence or an error (both
  // reported to the sink).
  kj::Promise<void> Run();
  // Stops reading and releases the job client.
  kj::Promise<void> Close();

  uint64_t task_list_changes() const { return task_list_changes_; }

 private:
  class TaskStream;
  struct Transfer;

  // Registers the dataset (unless given by id) and creates or joins the job;
  // again on the next connection when the connection drops before both are
  // answered (a dispatcher restart or an HA takeover): both calls are
  // idempotent but for an anonymous job, whose orphan the dispatcher
  // collects like any job without job clients.
  kj::Promise<kj::Own<JobClient>> OpenJob();
  kj::Promise<void> Follow();
  void SyncStreams();
  kj::Promise<void> RoundRobin();
  kj::Promise<capnp::Response<rpc::WorkerData::GetElementsResults>> Call(
      const TaskDescription& task, uint64_t consumer_id, uint64_t sequence, int64_t round);
  Transfer& TransferTo(const std::string& address);
  uint64_t NewConsumerId();
  void WakeFollow();
  void taskFailed(kj::Exception&& e) override;

  kj::Network& network_;
  kj::Timer& timer_;
  const ReaderOptions& options_;
  ElementSink& sink_;
  std::mt19937_64 rng_;
  ReconnectingConnection connection_;
  kj::Own<JobClient> job_;
  std::map<uint64_t, kj::Own<TaskStream>> streams_;     // by task id
  std::map<uint64_t, bool> ended_;                      // tasks that ended for this consumer
  std::map<std::string, kj::Own<Transfer>> transfers_;  // by transfer address
  uint64_t task_list_changes_ = 0;
  bool closed_ = false;
  bool sink_done_ = false;  // round robin ended
  bool heartbeat_asked_ = false;
  int64_t round_ = 0;  // round robin: the next round to read
  uint64_t rr_consumer_id_ = 0;
  std::map<uint64_t, uint64_t> rr_sequences_;  // round robin: next sequence by task
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> follow_wake_;
  kj::TaskSet background_{*this};
  kj::Promise<void> round_robin_ = nullptr;  // declared last: cancelled first
};

}  // namespace dispatch::clients
