// LinkSplitFetcher: the SplitFetcher of one (task, split provider), backed by
// the agent's link. Sequence numbers start at `first_sequence` and advance only when an
// answer arrives; a call that fails with a retryable error (lost reply,
// dropped connection, dispatcher restart) is sent again with the same
// sequence once the worker is registered again. An empty answer that is not
// the end ("none now": another task holds splits of the repetition that may
// be requeued) is asked again with the next sequence after kAskAgainDelay,
// so Next() resolves only with splits or the end. One call in flight at a time.
#pragma once

#include <kj/timer.h>

#include <cstdint>

#include "clients/agent_link.h"
#include "clients/agent_status.h"
#include "clients/task_handler.h"

namespace dispatch::clients {

class LinkSplitFetcher final : public SplitFetcher {
 public:
  LinkSplitFetcher(AgentLink& link, kj::Timer& timer, StatusBoard& board, uint64_t task_id,
                   uint32_t provider_index, uint32_t batch_size, uint64_t first_sequence = 1);

  // How long a "none now" answer waits before the next ask.
  static constexpr kj::Duration kAskAgainDelay = 50 * kj::MILLISECONDS;

  kj::Promise<SplitBatch> Next(int64_t repetition) override;
  uint64_t next_sequence() const override { return next_sequence_; }

 private:
  // One getSplit (retried with its sequence until answered), and again
  // after a "none now" answer.
  kj::Promise<SplitBatch> Ask(int64_t repetition);

  AgentLink& link_;
  kj::Timer& timer_;
  StatusBoard& board_;
  const uint64_t task_id_;
  const uint32_t provider_index_;
  const uint32_t batch_size_;
  uint64_t next_sequence_;
  bool in_flight_ = false;
};

}  // namespace dispatch::clients
