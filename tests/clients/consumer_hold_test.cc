// TaskProducer holds a consumer's unacknowledged reply for it when its last
// transfer connection closes, with the task's clock in the test's hands
// (kj::TimerImpl): a consumer that comes back acknowledges it (next sequence)
// or has it repeated (same sequence); one that does not gives it to the
// others once ProducerLimits::consumer_hold_ms is over, and no earlier; the
// task's end waits for it; at most max_held_consumers are held.
#include <capnp/message.h>
#include <gtest/gtest.h>
#include <kj/async.h>
#include <kj/timer.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clients/builtin_dataset_kinds.h"
#include "clients/task_producer.h"

namespace dispatch::clients {
namespace {

constexpr uint32_t kHoldMs = 1000;

using Elements = std::vector<std::string>;

class FakeContext final : public TaskContext {
 public:
  FakeContext(TaskDescription task, std::string definition)
      : task_(std::move(task)), definition_(std::move(definition)) {}
  const TaskDescription& task() const override { return task_; }
  SplitFetcher& splits(uint32_t) override { KJ_FAIL_REQUIRE("an OFF task reads no splits"); }
  kj::Promise<DatasetDefinition> GetDatasetDef() override {
    return DatasetDefinition{.dataset_id = 1, .definition = definition_, .metadata = ""};
  }
  kj::Timer& timer() override { return timer_; }
  kj::TimerImpl timer_{kj::origin<kj::TimePoint>()};

 private:
  const TaskDescription task_;
  const std::string definition_;
};

Elements Range(uint64_t from, uint64_t to) {
  Elements out;
  for (uint64_t i = from; i < to; ++i) out.push_back(std::to_string(i));
  return out;
}

// A task's producer, its context and the loop they run on. (Not a gtest
// fixture: KJ's destructors may throw, and a fixture's may not.)
class Harness {
 public:
  // Runs a task of `range count=COUNT` to the end of its source (or a full buffer).
  explicit Harness(uint64_t count, ProducerLimits limits = {}, uint32_t round_robin_consumers = 0) {
    KJ_REQUIRE(RegisterBuiltinDatasetKinds(kinds_).ok());
    limits.consumer_hold_ms = kHoldMs;
    TaskDescription task;
    task.task_id = 1;
    task.processing_mode = rpc::ProcessingMode::OFF;
    task.num_consumers = round_robin_consumers;
    context_ = std::make_unique<FakeContext>(task, "range count=" + std::to_string(count));
    producer_ = std::make_unique<TaskProducer>(task, kinds_, directory_, limits);
    run_ = producer_->Run(*context_).then([this]() { finished_ = true; }).eagerlyEvaluate(nullptr);
    loop_.run();
  }

  struct Answer {
    bool answered = false;  // false: the call would wait
    rpc::ElementStatus status = rpc::ElementStatus::NOT_READY;
    Elements elements;
  };
  // getElements(consumer, sequence) for up to 4 elements, on `connection`.
  Answer Ask(uint64_t consumer, uint64_t sequence, uint64_t connection, int64_t index = -1,
             int64_t round = -1) {
    ElementAsk ask;
    ask.consumer_id = consumer;
    ask.sequence = sequence;
    ask.consumer_index = index;
    ask.round = round;
    ask.max_elements = 4;
    ask.connection = connection;
    capnp::MallocMessageBuilder message;
    std::shared_ptr<const void> pin;
    Answer answer;
    answer.answered = producer_->TryServe(
        ask, [&message]() { return message.initRoot<rpc::ElementResult>(); }, &pin);
    if (!answer.answered) return answer;
    auto result = message.getRoot<rpc::ElementResult>().asReader();
    answer.status = result.getStatus();
    for (auto e : result.getElements()) answer.elements.emplace_back(e.asChars().begin(), e.size());
    return answer;
  }
  Elements Get(uint64_t consumer, uint64_t sequence, uint64_t connection) {
    Answer answer = Ask(consumer, sequence, connection);
    EXPECT_TRUE(answer.answered && answer.status == rpc::ElementStatus::READY)
        << "consumer " << consumer << " sequence " << sequence;
    return answer.elements;
  }
  // A reply, then the connection it came on closes.
  Elements GetThenDetach(uint64_t consumer, uint64_t sequence, uint64_t connection) {
    Elements elements = Get(consumer, sequence, connection);
    producer_->DetachConsumer(consumer, connection);
    return elements;
  }
  void Advance(uint32_t ms) {
    context_->timer_.advanceTo(context_->timer_.now() + ms * kj::MILLISECONDS);
    loop_.run();
  }

  void Run() { loop_.run(); }
  TaskProducer& producer() { return *producer_; }
  bool finished() const { return finished_; }

 private:
  kj::EventLoop loop_;
  kj::WaitScope wait_scope_{loop_};
  DatasetKindRegistry kinds_;
  ProducerDirectory directory_;
  std::unique_ptr<FakeContext> context_;
  std::unique_ptr<TaskProducer> producer_;
  bool finished_ = false;
  kj::Promise<void> run_ = nullptr;  // declared last: cancelled first
};

TEST(ConsumerHold, AReturningConsumersNextSequenceAcknowledgesItsHeldReply) {
  Harness h(100);
  EXPECT_EQ(h.GetThenDetach(7, 1, /*connection=*/1), Range(0, 4));
  EXPECT_EQ(h.producer().held_consumers(), 1u);
  EXPECT_EQ(h.Get(7, 2, 2), Range(4, 8)) << "the held reply was not acknowledged";
  EXPECT_EQ(h.producer().held_consumers(), 0u);
  h.Advance(2 * kHoldMs);
  EXPECT_EQ(h.producer().expired_consumers(), 0u);
  EXPECT_EQ(h.Get(8, 1, 2), Range(8, 12)) << "an acknowledged reply was handed on";
}

TEST(ConsumerHold, AReturningConsumerAskingTheSameSequenceGetsTheSameReplyAsOftenAsItIsLost) {
  Harness h(100);
  const Elements reply = h.GetThenDetach(7, 1, 1);
  for (uint64_t connection = 2; connection <= 4; ++connection) {
    EXPECT_EQ(h.GetThenDetach(7, 1, connection), reply) << "on connection " << connection;
    EXPECT_EQ(h.producer().held_consumers(), 1u);
  }
  EXPECT_EQ(h.Get(8, 1, 5), Range(4, 8)) << "a held reply was handed on";
  EXPECT_EQ(h.Get(7, 2, 5), Range(8, 12));
}

TEST(ConsumerHold, AConsumerThatDoesNotReturnGivesItsReplyToOthersOnceTheHoldIsOver) {
  Harness h(100);
  EXPECT_EQ(h.GetThenDetach(7, 1, 1), Range(0, 4));
  EXPECT_EQ(h.Get(8, 1, 2), Range(4, 8));
  h.Advance(kHoldMs - 1);
  EXPECT_EQ(h.producer().held_consumers(), 1u);
  EXPECT_EQ(h.Get(8, 2, 2), Range(8, 12)) << "handed on before the hold was over";
  h.Advance(1);
  EXPECT_EQ(h.producer().held_consumers(), 0u);
  EXPECT_EQ(h.producer().expired_consumers(), 1u);
  EXPECT_EQ(h.Get(8, 3, 2), Range(0, 4));
  // Back too late: a consumer afresh, its old reply gone to consumer 8.
  EXPECT_EQ(h.Get(7, 2, 3), Range(12, 16));
}

TEST(ConsumerHold, TheTaskEndsOnlyOnceAHeldReplyIsHandedOnAndRead) {
  Harness h(8);
  EXPECT_EQ(h.Get(7, 1, 1), Range(0, 4));
  EXPECT_EQ(h.Get(8, 1, 2), Range(4, 8));
  h.producer().DetachConsumer(7, 1);
  // The source has ended, but consumer 7's elements may come back.
  EXPECT_FALSE(h.Ask(8, 2, 2).answered) << "the end came before a held reply was settled";
  h.Advance(kHoldMs);
  EXPECT_EQ(h.Get(8, 2, 2), Range(0, 4));
  EXPECT_FALSE(h.finished());
  Harness::Answer end = h.Ask(8, 3, 2);
  EXPECT_TRUE(end.answered && end.status == rpc::ElementStatus::END_OF_SEQUENCE);
  h.Run();
  EXPECT_TRUE(h.finished());
}

TEST(ConsumerHold, TheTaskEndsOnceAReturningConsumerAcknowledges) {
  Harness h(4);
  EXPECT_EQ(h.GetThenDetach(7, 1, 1), Range(0, 4));
  EXPECT_FALSE(h.Ask(8, 1, 2).answered);
  Harness::Answer end = h.Ask(7, 2, 3);
  EXPECT_TRUE(end.answered && end.status == rpc::ElementStatus::END_OF_SEQUENCE);
  h.Run();
  EXPECT_TRUE(h.finished());
  EXPECT_EQ(h.Ask(8, 1, 2).status, rpc::ElementStatus::END_OF_SEQUENCE);
}

TEST(ConsumerHold, HoldsAtMostMaxHeldConsumers) {
  ProducerLimits limits;
  limits.max_held_consumers = 1;
  Harness h(100, limits);
  EXPECT_EQ(h.Get(7, 1, 1), Range(0, 4));
  EXPECT_EQ(h.Get(8, 1, 2), Range(4, 8));
  h.producer().DetachConsumer(7, 1);
  h.producer().DetachConsumer(8, 2);
  EXPECT_EQ(h.producer().held_consumers(), 1u);
  EXPECT_EQ(h.producer().expired_consumers(), 1u) << "past the limit, the first held goes";
  EXPECT_EQ(h.Get(9, 1, 3), Range(0, 4));
  EXPECT_EQ(h.Get(8, 2, 4), Range(8, 12)) << "the second is still held";
}

TEST(ConsumerHold, AConsumerStillConnectedElsewhereIsNotHeld) {
  Harness h(100);
  EXPECT_EQ(h.Get(7, 1, 1), Range(0, 4));
  EXPECT_EQ(h.Get(7, 1, 2), Range(0, 4));  // the same call again, on a second connection
  h.producer().DetachConsumer(7, 1);
  EXPECT_EQ(h.producer().held_consumers(), 0u);
  h.Advance(2 * kHoldMs);
  EXPECT_EQ(h.Get(8, 1, 2), Range(4, 8)) << "a connected consumer's reply was handed on";
  EXPECT_EQ(h.Get(7, 2, 2), Range(8, 12));
}

TEST(ConsumerHold, ARoundRobinConsumerReturningRepeatsItsRoundAndOneGoneLeavesItUnread) {
  Harness h(100, {}, /*round_robin_consumers=*/2);
  Harness::Answer first = h.Ask(7, 1, 1, /*index=*/0, /*round=*/0);
  EXPECT_EQ(first.elements, Range(0, 1));
  h.producer().DetachConsumer(7, 1);
  Harness::Answer again = h.Ask(7, 1, 2, 0, 0);
  EXPECT_EQ(again.elements, Range(0, 1)) << "a returning consumer lost its round";
  EXPECT_EQ(h.Ask(8, 1, 2, 1, 0).elements, Range(1, 2));
  EXPECT_EQ(h.Ask(7, 2, 2, 0, 1).elements, Range(2, 3));
  h.producer().DetachConsumer(7, 2);
  h.Advance(kHoldMs);
  EXPECT_EQ(h.producer().expired_consumers(), 1u);
  // A round's element is its consumer's: as before, it is not handed on.
  EXPECT_EQ(h.Ask(8, 2, 3, 1, 1).elements, Range(3, 4));
  EXPECT_EQ(h.Ask(9, 1, 3, 0, 2).elements, Range(4, 5));
}

}  // namespace
}  // namespace dispatch::clients
