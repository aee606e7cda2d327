#include "clients/split_fetcher.h"

#include <kj/debug.h>

#include "common/log.h"

namespace dispatch::clients {

LinkSplitFetcher::LinkSplitFetcher(AgentLink& link, kj::Timer& timer, StatusBoard& board,
                                   uint64_t task_id, uint32_t provider_index, uint32_t batch_size,
                                   uint64_t first_sequence)
    : link_(link),
      timer_(timer),
      board_(board),
      task_id_(task_id),
      provider_index_(provider_index),
      batch_size_(batch_size),
      next_sequence_(first_sequence) {}

kj::Promise<SplitBatch> LinkSplitFetcher::Next(int64_t repetition) {
  KJ_REQUIRE(!in_flight_, "SplitFetcher::Next() called while the previous call is in flight",
             task_id_, provider_index_);
  in_flight_ = true;
  // in_flight_ clears when the call ends, also when the caller cancels it; a
  // cancelled call's sequence is used again, which the dispatcher answers
  // the same way.
  return Ask(repetition).attach(kj::defer([this]() { in_flight_ = false; }));
}

kj::Promise<SplitBatch> LinkSplitFetcher::Ask(int64_t repetition) {
  uint64_t sequence = next_sequence_;
  uint64_t task_id = task_id_;
  uint32_t provider = provider_index_;
  uint32_t batch = batch_size_;
  auto call = [task_id, provider, batch, repetition,
               sequence](rpc::Dispatcher::Client dispatcher) -> kj::Promise<SplitBatch> {
    auto request = dispatcher.getSplitRequest();
    auto split_request = request.initRequest();
    split_request.setTaskId(task_id);
    split_request.setRepetition(repetition);
    split_request.setProviderIndex(provider);
    split_request.setSequence(sequence);
    split_request.setMaxSplits(batch);
    return request.send().then([](capnp::Response<rpc::Dispatcher::GetSplitResults> results) {
      auto response = results.getResponse();
      SplitBatch out;
      out.end_of_splits = response.getEndOfSplits();
      out.repetition = response.getRepetition();
      out.splits.reserve(response.getSplits().size());
      for (auto split : response.getSplits()) {
        auto payload = split.getPayload();
        out.splits.push_back(
            SplitItem{split.getIndex(),
                      std::string(reinterpret_cast<const char*>(payload.begin()), payload.size())});
      }
      return out;
    });
  };
  auto on_retry = [this, sequence](const kj::Exception& e) {
    board_.Update([](WorkerAgentStatus& s) { ++s.split_retries; });
    Log(LogLevel::kDebug, "task ", task_id_, " provider ", provider_index_, ": getSplit #",
        sequence, " will be sent again: ", e.getDescription());
  };
  return CallWithRetry<SplitBatch>(link_, timer_, kj::mv(call), kj::mv(on_retry))
      .then([this, repetition](SplitBatch&& batch) -> kj::Promise<SplitBatch> {
        ++next_sequence_;
        if (!batch.splits.empty() || batch.end_of_splits) return kj::mv(batch);
        // None now: asking again (a new sequence) also tells the dispatcher
        // this task holds nothing.
        return timer_.afterDelay(kAskAgainDelay).then([this, repetition]() {
          return Ask(repetition);
        });
      });
}

}  // namespace dispatch::clients
