#include "clients/task_producer.h"

#include <kj/debug.h>

#include <algorithm>

#include "clients/element_list.h"
#include "common/log.h"
#include "common/rpc_status.h"

namespace dispatch::clients {
namespace {

// Elements, and bytes, produced per loop turn before yielding to the transfer
// server. The byte bound matters for large elements: without it one turn
// filled the whole 64 MiB buffer before a waiting request was answered.
constexpr size_t kElementsPerTurn = 1024;
constexpr size_t kBytesPerTurn = 1 << 20;

std::string TaskName(uint64_t id) { return "task " + std::to_string(id); }

}  // namespace

kj::Promise<void> ChangeSignal::Wait() {
  // Waits given up (a call that timed out or whose connection closed) leave
  // their fulfillers here until the next Notify, which may be long in coming
  // (a worker's directory between tasks): drop them once they could pile up.
  if (waiters_.size() >= prune_at_) {
    kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> live;
    for (auto& waiter : waiters_) {
      if (waiter->isWaiting()) live.add(kj::mv(waiter));
    }
    waiters_ = kj::mv(live);
    prune_at_ = std::max<size_t>(kMinPruneAt, 2 * waiters_.size());
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  waiters_.add(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

void ChangeSignal::Notify() {
  auto waiters = kj::mv(waiters_);
  for (auto& waiter : waiters) waiter->fulfill();
}

TaskProducer::TaskProducer(const TaskDescription& task, const DatasetKindRegistry& kinds,
                           ProducerDirectory& directory, ProducerLimits limits)
    : task_(task),
      kinds_(kinds),
      directory_(directory),
      limits_(limits),
      spares_(directory.spares()) {
  directory_.Add(this);
}

TaskProducer::~TaskProducer() noexcept(false) {
  directory_.Remove(this);
  for (std::string& element : buffer_) spares_->Keep(kj::mv(element));
}

kj::Promise<void> TaskProducer::Run(TaskContext& context) {
  timer_ = &context.timer();
  expiry_ = ExpireHeldConsumers().eagerlyEvaluate([this](kj::Exception&& e) {
    Log(LogLevel::kError, TaskName(task_.task_id),
        ": expiring held consumers failed: ", e.getDescription());
  });
  return context.GetDatasetDef()
      .then([this, &context](DatasetDefinition&& def) -> kj::Promise<void> {
        definition_ = kj::mv(def.definition);
        if (task_.processing_mode == rpc::ProcessingMode::DYNAMIC) {
          return ProduceDynamic(context);
        }
        // Static sharding when the dispatcher placed this worker in its list.
        Shard shard = task_.worker_index >= 0 && task_.num_workers > 0
                          ? Shard::Static(task_.worker_index, task_.num_workers)
                          : Shard::Everything();
        Result<std::unique_ptr<ElementSource>> source = kinds_.Open(definition_, shard);
        if (!source.ok()) return ExceptionFromStatus(source.status());
        return Pump(std::shared_ptr<ElementSource>(std::move(source).value()));
      })
      .then([this]() {
        end_ = true;
        changed_.Notify();
        return WhenAllAcknowledged();
      })
      .then([this]() { directory_.MarkFinished(task_.task_id); })
      .catch_([this](kj::Exception&& e) -> kj::Promise<void> {
        // Consumers hear the error instead of waiting for elements forever.
        Log(LogLevel::kError, TaskName(task_.task_id), " failed: ", e.getDescription());
        failure_ = kj::cp(e);
        changed_.Notify();
        return kj::mv(e);
      });
}

kj::Promise<void> TaskProducer::ProduceDynamic(TaskContext& context) {
  return context.splits(0).Next(0).then([this, &context](SplitBatch&& batch) -> kj::Promise<void> {
    const bool last = batch.end_of_splits;
    auto source = std::make_shared<SplitChainSource>(
        kj::mv(batch.splits),
        [this](const SplitItem& split) { return kinds_.Open(definition_, Shard::OfSplit(split)); });
    return Pump(kj::mv(source)).then([this, &context, last]() -> kj::Promise<void> {
      if (last) return kj::READY_NOW;
      // Asking again finishes this batch's splits at the dispatcher: only
      // once consumers hold every element of them.
      return WhenAllAcknowledged().then([this, &context]() { return ProduceDynamic(context); });
    });
  });
}

bool TaskProducer::HasRoom() const {
  return buffer_.size() < limits_.max_buffered_elements &&
         buffered_bytes_ < limits_.max_buffered_bytes;
}

kj::Promise<void> TaskProducer::Pump(std::shared_ptr<ElementSource> source) {
  size_t produced = 0;
  size_t produced_bytes = 0;
  while (HasRoom() && produced < kElementsPerTurn && produced_bytes < kBytesPerTurn) {
    std::string element;
    spares_->Take(&element);
    Result<bool> more = source->Next(&element);
    if (!more.ok()) return ExceptionFromStatus(more.status());
    if (!*more) {
      if (produced > 0) changed_.Notify();
      return kj::READY_NOW;
    }
    buffered_bytes_ += element.size();
    produced_bytes += element.size();
    buffer_.push_back(kj::mv(element));
    ++unacknowledged_;
    ++produced;
  }
  if (produced > 0) changed_.Notify();
  kj::Promise<void> next = HasRoom() ? kj::evalLater([]() {}) : room_.Wait();
  return next.then([this, source = kj::mv(source)]() mutable { return Pump(kj::mv(source)); });
}

kj::Promise<void> TaskProducer::WhenAllAcknowledged() {
  if (unacknowledged_ == 0) return kj::READY_NOW;
  return acknowledged_.Wait().then([this]() { return WhenAllAcknowledged(); });
}

void TaskProducer::Acknowledge(size_t count) {
  KJ_ASSERT(count <= unacknowledged_, "acknowledged more elements than produced", task_.task_id);
  unacknowledged_ -= count;
  if (unacknowledged_ == 0) {
    acknowledged_.Notify();
    if (end_) changed_.Notify();  // calls waiting to hear the end
  }
}

kj::Promise<void> TaskProducer::WhenChanged() { return changed_.Wait(); }

kj::Exception TaskProducer::Failure() const {
  KJ_IF_MAYBE (e, failure_) {
    return KJ_EXCEPTION(FAILED, kj::str(TaskName(task_.task_id).c_str(),
                                        " failed on its worker: ", e->getDescription()));
  }
  KJ_FAIL_ASSERT("no failure recorded");
}

void TaskProducer::Fill(const ConsumerState& state, rpc::ElementResult::Builder result,
                        std::shared_ptr<const void>* pin) {
  result.setStatus(state.status);
  result.setRound(state.round);
  const std::vector<std::string>& reply = *state.reply;
  SetElementList(reply, result.initElements(static_cast<unsigned>(reply.size())));
  *pin = state.reply;
}

bool TaskProducer::TryServe(const ElementAsk& ask,
                            kj::FunctionParam<rpc::ElementResult::Builder()> result,
                            std::shared_ptr<const void>* pin) {
  if (failure_ != nullptr) throw Failure();
  if (ask.consumer_id == 0) ThrowStatus(InvalidArgumentError("consumerId must be nonzero"));
  if (ask.sequence == 0) ThrowStatus(InvalidArgumentError("element sequence numbers start at 1"));
  const bool round_robin = task_.num_consumers > 0;
  if (round_robin) {
    if (ask.consumer_index < 0 || ask.consumer_index >= task_.num_consumers) {
      ThrowStatus(InvalidArgumentError(
          TaskName(task_.task_id) + " has " + std::to_string(task_.num_consumers) +
          " round-robin consumers, not consumer index " + std::to_string(ask.consumer_index)));
    }
    if (ask.round < 0) {
      ThrowStatus(InvalidArgumentError(TaskName(task_.task_id) +
                                       " is round robin: a request needs a round >= 0"));
    }
  } else if (ask.consumer_index >= 0 || ask.round >= 0) {
    ThrowStatus(InvalidArgumentError(TaskName(task_.task_id) +
                                     " is not round robin: consumer index and round must be -1"));
  }
  KJ_REQUIRE(ask.connection != 0, "an ask names the connection it came on", task_.task_id);
  ConsumerState& state = consumers_.try_emplace(ask.consumer_id).first->second;
  if (state.reply == nullptr) state.reply = NewReply();
  state.connections.insert(ask.connection);
  if (state.held_until != nullptr) {
    // Back in time, on a new connection: its reply is acknowledged or
    // repeated below, as if the connection had never closed.
    state.held_until = nullptr;
    --held_;
  }
  if (ask.sequence < state.sequence) {
    ThrowStatus(FailedPreconditionError(
        TaskName(task_.task_id) + ": consumer request " + std::to_string(ask.sequence) +
        " is older than its last one, " + std::to_string(state.sequence)));
  }
  if (ask.sequence == state.sequence && state.status != rpc::ElementStatus::NOT_READY) {
    Fill(state, result(), pin);  // the reply was lost: the same one again
    return true;
  }
  if (ask.sequence > state.sequence) {
    // Asking for the next reply acknowledges the last one.
    const size_t received = state.reply->size();
    // A new vector: the connection may still hold the old one.
    state.reply = NewReply();
    state.sequence = ask.sequence;
    state.status = rpc::ElementStatus::NOT_READY;
    state.round = -1;
    if (received > 0) Acknowledge(received);
  }
  if (round_robin) {
    if (!TakeRoundRobin(ask, state)) return false;
  } else if (buffer_.empty()) {
    // An unacknowledged reply elsewhere may yet come back to the buffer (its
    // consumer gone for good): the end waits until every element was
    // acknowledged (Acknowledge wakes the wait).
    if (!end_ || unacknowledged_ > 0) return false;
    state.status = rpc::ElementStatus::END_OF_SEQUENCE;
  } else {
    const uint32_t max_elements =
        std::clamp<uint32_t>(ask.max_elements, 1, limits_.max_reply_elements);
    const uint64_t max_bytes = ask.max_bytes == 0
                                   ? limits_.max_reply_bytes
                                   : std::min<uint64_t>(ask.max_bytes, limits_.max_reply_bytes);
    uint64_t bytes = 0;
    std::vector<std::string>& reply = *state.reply;
    while (!buffer_.empty() && reply.size() < max_elements &&
           (reply.empty() || bytes + buffer_.front().size() <= max_bytes)) {
      bytes += buffer_.front().size();
      buffered_bytes_ -= buffer_.front().size();
      reply.push_back(kj::mv(buffer_.front()));
      buffer_.pop_front();
    }
    state.status = rpc::ElementStatus::READY;
    room_.Notify();
  }
  Fill(state, result(), pin);
  return true;
}

namespace {

// What a kept buffer costs beyond its capacity: the string and the
// allocator's header.
constexpr uint64_t kBufferOverheadBytes = sizeof(std::string) + 16;

uint64_t BufferCost(const std::string& buffer) {
  return buffer.capacity() + kBufferOverheadBytes;
}

}  // namespace

void ElementBufferPool::Take(std::string* element) {
  if (spare_.empty()) return;
  *element = kj::mv(spare_.back());
  spare_.pop_back();
  bytes_ -= BufferCost(*element);
}

void ElementBufferPool::Keep(std::string&& element) {
  // Small buffers are kept too: a reply of thousands of 100 B elements
  // freed at once went through glibc's bins (its per-thread cache holds 7
  // chunks per size), which cost the worker more than producing them. A
  // string whose bytes sit inside it (capacity 15, moved-from ones) has no
  // buffer to give.
  constexpr size_t kInlineCapacity = 15;
  if (element.capacity() <= kInlineCapacity || bytes_ + BufferCost(element) > limit_bytes_) return;
  bytes_ += BufferCost(element);
  spare_.push_back(kj::mv(element));
}

TaskProducer::Reply TaskProducer::NewReply() const {
  // The deleter runs on the agent thread (where the connection lets go of
  // its pin), so the pool needs no lock.
  return Reply(new std::vector<std::string>(), [pool = spares_](std::vector<std::string>* reply) {
    for (std::string& element : *reply) pool->Keep(kj::mv(element));
    delete reply;
  });
}

bool TaskProducer::TakeRoundRobin(const ElementAsk& ask, ConsumerState& state) {
  const size_t n = task_.num_consumers;
  auto it = rounds_.find(ask.round);
  if (it == rounds_.end()) {
    if (buffer_.size() < n) {
      if (!end_) return false;
      // Fewer elements than consumers are left: a round is all or nothing.
      const size_t dropped = buffer_.size();
      buffer_.clear();
      buffered_bytes_ = 0;
      if (dropped > 0) Acknowledge(dropped);
      state.status = rpc::ElementStatus::END_OF_SEQUENCE;
      return true;
    }
    if (rounds_.size() >= limits_.max_rounds) return false;
    Round round;
    for (size_t i = 0; i < n; ++i) {
      buffered_bytes_ -= buffer_.front().size();
      round.slots.push_back(kj::mv(buffer_.front()));
      buffer_.pop_front();
    }
    round.taken.assign(n, false);
    round.remaining = n;
    it = rounds_.emplace(ask.round, kj::mv(round)).first;
    room_.Notify();
  }
  Round& round = it->second;
  const size_t i = static_cast<size_t>(ask.consumer_index);
  if (round.taken[i]) {
    ThrowStatus(FailedPreconditionError(TaskName(task_.task_id) + ": consumer " +
                                        std::to_string(i) + " already read round " +
                                        std::to_string(ask.round)));
  }
  round.taken[i] = true;
  state.reply->push_back(kj::mv(round.slots[i]));
  state.status = rpc::ElementStatus::READY;
  state.round = ask.round;
  if (--round.remaining == 0) rounds_.erase(it);
  return true;
}

void TaskProducer::DetachConsumer(uint64_t consumer_id, uint64_t connection) {
  auto it = consumers_.find(consumer_id);
  if (it == consumers_.end()) return;
  ConsumerState& state = it->second;
  if (state.connections.erase(connection) == 0 || !state.connections.empty()) return;
  if (state.reply == nullptr || state.reply->empty()) {
    consumers_.erase(it);  // nothing to acknowledge or repeat
    return;
  }
  // Its reply may have arrived (the consumer asks for the next sequence
  // when it comes back) or not (it asks for the same one): only the consumer
  // knows, so the reply is kept for it, for a while.
  if (timer_ == nullptr || limits_.consumer_hold_ms == 0) {
    // No timer before Run(), and no reply either then: nothing is held.
    ReleaseConsumer(it);
    return;
  }
  if (held_ >= limits_.max_held_consumers) {
    // Past the limit: the consumer that would be released first goes now.
    auto first = consumers_.end();
    kj::TimePoint first_until = kj::origin<kj::TimePoint>();
    for (auto c = consumers_.begin(); c != consumers_.end(); ++c) {
      KJ_IF_MAYBE (until, c->second.held_until) {
        if (first == consumers_.end() || *until < first_until) {
          first = c;
          first_until = *until;
        }
      }
    }
    KJ_ASSERT(first != consumers_.end(), "held consumers counted but none found", held_);
    ReleaseConsumer(first);
  }
  state.held_until = timer_->now() + limits_.consumer_hold_ms * kj::MILLISECONDS;
  ++held_;
  held_changed_.Notify();
}

void TaskProducer::ReleaseConsumer(std::map<uint64_t, ConsumerState>::iterator it) {
  // Nothing writes the reply any more: its connections are gone.
  std::vector<std::string> reply;
  if (it->second.reply != nullptr) reply = kj::mv(*it->second.reply);
  if (it->second.held_until != nullptr) {
    --held_;
    ++expired_;
  }
  consumers_.erase(it);
  if (reply.empty()) return;
  if (task_.num_consumers > 0) {
    // A round's element belongs to its consumer and round; nobody else takes it.
    Acknowledge(reply.size());
    return;
  }
  for (auto e = reply.rbegin(); e != reply.rend(); ++e) {
    buffered_bytes_ += e->size();
    buffer_.push_front(kj::mv(*e));
  }
  changed_.Notify();
}

kj::Promise<void> TaskProducer::ExpireHeldConsumers() {
  const kj::TimePoint now = timer_->now();
  bool any_held = false;
  kj::TimePoint next = now;  // the earliest expiry of those still held
  for (auto it = consumers_.begin(); it != consumers_.end();) {
    auto current = it++;
    KJ_IF_MAYBE (until, current->second.held_until) {
      if (*until <= now) {
        Log(LogLevel::kDebug, TaskName(task_.task_id), ": consumer ", current->first,
            " did not come back; its reply goes to others");
        ReleaseConsumer(current);
        continue;
      }
      if (!any_held || *until < next) next = *until;
      any_held = true;
    }
  }
  kj::Promise<void> wake = held_changed_.Wait();
  if (any_held) wake = kj::mv(wake).exclusiveJoin(timer_->atTime(next));
  return wake.then([this]() { return ExpireHeldConsumers(); });
}

void ProducerDirectory::Add(TaskProducer* producer) {
  producers_[producer->task_id()] = producer;
  changed_.Notify();
}

void ProducerDirectory::Remove(TaskProducer* producer) {
  auto it = producers_.find(producer->task_id());
  if (it != producers_.end() && it->second == producer) producers_.erase(it);
  changed_.Notify();
}

TaskProducer* ProducerDirectory::Find(uint64_t task_id) const {
  auto it = producers_.find(task_id);
  return it == producers_.end() ? nullptr : it->second;
}

void ProducerDirectory::MarkFinished(uint64_t task_id) {
  finished_.insert(task_id);
  if (finished_.size() > kMaxFinished) finished_.erase(finished_.begin());
  changed_.Notify();
}

kj::Own<TaskHandler> ProducingTaskFactory::CreateHandler(const TaskDescription& task) {
  return kj::heap<TaskProducer>(task, kinds_, directory_, limits_);
}

}  // namespace dispatch::clients
