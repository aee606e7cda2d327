// TaskProducer: turns one task into elements on a worker (its kind's source for
// the task's shard; DYNAMIC: split batch after split batch) in a bounded buffer
// served by the transfer server. Invariant: the next split batch is asked for
// (which finishes the previous one at the dispatcher) and the task completes
// only once consumers acknowledged every element before it, so a requeued
// split is never a lost one. A consumer's last reply is kept per (task,
// consumerId), not per connection: it outlives the consumer's connections for
// at most `consumer_hold_ms`, so a consumer that reconnects acknowledges or
// repeats it; only one that does not come back has its reply's elements
// served to others. Agent thread only.
#pragma once

#include <kj/async.h>
#include <kj/function.h>
#include <kj/timer.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "clients/dataset_kind.h"
#include "clients/task_handler.h"
#include "schema/data_transfer.capnp.h"

namespace dispatch::clients {

struct ProducerLimits {
  size_t max_buffered_elements = 8192;
  size_t max_buffered_bytes = 64 << 20;
  uint32_t max_reply_elements = 8192;
  uint64_t max_reply_bytes = 16 << 20;  // a reply holds at least one element, whatever its size
  size_t max_rounds = 64;               // round robin: rounds built but not yet read by all
  // How long a consumer whose last transfer connection closed keeps its
  // unacknowledged reply: asking again from a new connection within it
  // acknowledges (next sequence) or repeats (same sequence) that reply.
  // Past it the reply's elements go back to the front of the buffer for
  // other consumers (round robin: they count as acknowledged). 0: at once.
  uint32_t consumer_hold_ms = 10000;
  // Consumers held so at once; past it, the one that would expire first
  // expires now.
  size_t max_held_consumers = 1024;
};

// One getElements call, as the producer sees it.
struct ElementAsk {
  uint64_t consumer_id = 0;
  uint64_t sequence = 0;
  int64_t consumer_index = -1;
  int64_t round = -1;
  uint32_t max_elements = 1;
  uint64_t max_bytes = 0;
  uint64_t connection = 0;  // the transfer connection it came on (nonzero)
};

// Buffers of elements that were sent, for sources to write later elements
// into: otherwise a 1 MiB element costs an allocation and a 1 MiB fill, and
// fresh memory costs a page fault per 4 KiB (~2 ms per MiB measured here,
// which made a job's first 100 MiB read at a fifth of the usual speed). One
// pool serves every task of a worker, so a new job starts with the buffers of
// the last one; it keeps at most `limit_bytes` (counted by capacity plus the
// string and the allocator's header). Loop thread only.
class ElementBufferPool {
 public:
  explicit ElementBufferPool(uint64_t limit_bytes) : limit_bytes_(limit_bytes) {}
  // Gives a kept buffer (holding old bytes) into `*element`, if there is one.
  void Take(std::string* element);
  void Keep(std::string&& element);
  uint64_t bytes() const { return bytes_; }

 private:
  std::vector<std::string> spare_;
  uint64_t bytes_ = 0;
  const uint64_t limit_bytes_;
};

class ProducerDirectory;

// Fulfils every waiter at once, in the order they began waiting: their
// continuations then run in that order too, so calls waiting on it are
// answered first come, first served.
class ChangeSignal {
 public:
  kj::Promise<void> Wait();
  void Notify();
  // Fulfillers held: every wait since the last Notify, less those dropped.
  size_t held() const { return waiters_.size(); }
  static constexpr size_t kMinPruneAt = 64;

 private:
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> waiters_;
  size_t prune_at_ = kMinPruneAt;  // waiters_ is pruned when it grows this long
};

class TaskProducer final : public TaskHandler {
 public:
  TaskProducer(const TaskDescription& task, const DatasetKindRegistry& kinds,
               ProducerDirectory& directory, ProducerLimits limits);
  ~TaskProducer() noexcept(false) override;

  kj::Promise<void> Run(TaskContext& context) override;

  // Answers `ask` into the builder `result()` returns and returns true,
  // or returns false when nothing can be answered yet (wait on WhenChanged(),
  // then ask again). Large elements are not copied into the reply: it
  // points at them, and `*pin` receives what keeps them alive; the caller
  // holds it until the reply has been written (its connection's next reply
  // for the same consumer, or the connection's end).
  // The consumer is attached to `ask.connection` until DetachConsumer.
  // Throws a KJ exception for a malformed ask or a failed task.
  bool TryServe(const ElementAsk& ask, kj::FunctionParam<rpc::ElementResult::Builder()> result,
                std::shared_ptr<const void>* pin);
  // Resolves when elements arrive, the stream ends, or the task fails.
  kj::Promise<void> WhenChanged();
  // `connection`, on which the consumer asked, closed. Once no connection
  // of the consumer is left, its unacknowledged reply is held for it for
  // `consumer_hold_ms` (see ProducerLimits); a consumer with nothing
  // unacknowledged is forgotten at once (it has nothing to repeat).
  void DetachConsumer(uint64_t consumer_id, uint64_t connection);

  uint64_t task_id() const { return task_.task_id; }
  // Consumers with no connection whose reply is held for their return.
  size_t held_consumers() const { return held_; }
  // Held consumers that did not return in time: their replies went to others.
  uint64_t expired_consumers() const { return expired_; }

 private:
  using Reply = std::shared_ptr<std::vector<std::string>>;
  struct ConsumerState {
    uint64_t sequence = 0;  // of the last reply
    // Its elements, unacknowledged; shared with the connection writing them.
    // Made by NewReply: whoever lets go of it last returns its buffers.
    Reply reply;
    int64_t round = -1;
    rpc::ElementStatus status = rpc::ElementStatus::NOT_READY;
    std::set<uint64_t> connections;       // open ones it asked on
    kj::Maybe<kj::TimePoint> held_until;  // set while held without a connection
  };
  struct Round {
    std::vector<std::string> slots;
    std::vector<bool> taken;
    size_t remaining = 0;
  };
  kj::Promise<void> ProduceDynamic(TaskContext& context);
  kj::Promise<void> Pump(std::shared_ptr<ElementSource> source);
  kj::Promise<void> WhenAllAcknowledged();
  bool HasRoom() const;
  void Acknowledge(size_t count);
  static void Fill(const ConsumerState& state, rpc::ElementResult::Builder result,
                   std::shared_ptr<const void>* pin);
  bool TakeRoundRobin(const ElementAsk& ask, ConsumerState& state);
  // The held consumers whose time is up give up their replies, then waits
  // for the next expiry or detach. Runs from Run() until the producer goes.
  kj::Promise<void> ExpireHeldConsumers();
  // Gives a consumer's unacknowledged reply to the others and forgets it.
  void ReleaseConsumer(std::map<uint64_t, ConsumerState>::iterator it);
  Reply NewReply() const;
  kj::Exception Failure() const;

  const TaskDescription task_;
  const DatasetKindRegistry& kinds_;
  ProducerDirectory& directory_;
  const ProducerLimits limits_;
  std::string definition_;
  std::deque<std::string> buffer_;
  uint64_t buffered_bytes_ = 0;
  const std::shared_ptr<ElementBufferPool> spares_;  // shared with the replies
  uint64_t unacknowledged_ = 0;  // in the buffer, in replies, in rounds
  bool end_ = false;             // the source has no more elements
  kj::Maybe<kj::Exception> failure_;
  std::map<uint64_t, ConsumerState> consumers_;
  size_t held_ = 0;  // consumers_ with a held_until
  uint64_t expired_ = 0;
  std::map<int64_t, Round> rounds_;
  kj::Timer* timer_ = nullptr;  // the task context's, from Run()
  ChangeSignal changed_;
  ChangeSignal room_;
  ChangeSignal acknowledged_;
  ChangeSignal held_changed_;           // a consumer was held: the expiry loop looks again
  kj::Promise<void> expiry_ = nullptr;  // declared last: cancelled first
};

// The producers a worker runs, by task, and the tasks that finished here (so
// a consumer asking after the dispatcher deleted a finished task hears end of
// sequence rather than "not ready"). Agent thread only.
class ProducerDirectory {
 public:
  explicit ProducerDirectory(uint64_t spare_limit_bytes = ProducerLimits().max_buffered_bytes)
      : spares_(std::make_shared<ElementBufferPool>(spare_limit_bytes)) {}
  const std::shared_ptr<ElementBufferPool>& spares() const { return spares_; }
  void Add(TaskProducer* producer);
  void Remove(TaskProducer* producer);
  TaskProducer* Find(uint64_t task_id) const;
  void MarkFinished(uint64_t task_id);
  bool Finished(uint64_t task_id) const { return finished_.contains(task_id); }
  // Resolves when a producer is added or removed or a task finishes: a call
  // for a task this worker does not run yet waits on it, in line with the
  // calls that wait for the same task's elements (a reader takes the replies
  // of its calls in the order it sent them, so they must be answered so).
  kj::Promise<void> WhenChanged() { return changed_.Wait(); }

 private:
  static constexpr size_t kMaxFinished = 1 << 16;  // the oldest are forgotten
  std::map<uint64_t, TaskProducer*> producers_;
  std::set<uint64_t> finished_;
  const std::shared_ptr<ElementBufferPool> spares_;
  ChangeSignal changed_;
};

// Creates a TaskProducer for every task.
class ProducingTaskFactory final : public TaskHandlerFactory {
 public:
  ProducingTaskFactory(const DatasetKindRegistry& kinds, ProducerDirectory& directory,
                       ProducerLimits limits = {})
      : kinds_(kinds), directory_(directory), limits_(limits) {}
  kj::Own<TaskHandler> CreateHandler(const TaskDescription& task) override;

 private:
  const DatasetKindRegistry& kinds_;
  ProducerDirectory& directory_;
  ProducerLimits limits_;
};

}  // namespace dispatch::clients
