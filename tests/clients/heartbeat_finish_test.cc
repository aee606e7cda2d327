// A WorkerAgent releases each heartbeat reply only when it sends the next
// heartbeat, so the Finish message Cap'n Proto owes the dispatcher for the
// reply travels in the same write as the next call: the dispatcher reads both
// at once instead of waking for a Finish of its own. Observed on the wire
// through a relay between the agent and the real dispatcher, which records
// every read of the agent's bytes as the RPC messages in them.
#include <gtest/gtest.h>

#include "tests/clients/client_test_support.h"
#include "tests/support/recording_relay.h"

namespace dispatch::testing {
namespace {

using Chunk = RecordingRelay::Chunk;
using From = RecordingRelay::From;
using capnp::rpc::Message;

TEST(HeartbeatFinish, TravelsWithTheNextHeartbeatNeverAlone) {
  DispatcherProcess dispatcher;
  RecordingRelay relay(dispatcher.address());
  // 20 ms heartbeats: a Finish sent as the reply arrives would be a read of
  // its own, 20 ms before the next call.
  TestAgent a(relay.address(), "agent-finish", TestSeed(), 20);
  ASSERT_TRUE(a.agent->Start().ok());
  auto calls_seen = [&] { return RecordingRelay::Count(relay.chunks(From::kClient), Message::CALL); };
  ASSERT_TRUE(WaitUntil([&] { return calls_seen() >= 30; })) << calls_seen() << " calls seen";
  a.agent->Stop();
  EXPECT_EQ(relay.failure(), "");
  // Connecting (bootstrap, authenticate) and registering finish their own
  // calls: only the steady heartbeats after the first ten calls are judged.
  size_t calls = 0, finishes = 0;
  for (const Chunk& chunk : relay.chunks(From::kClient)) {
    const bool steady = calls >= 10;
    for (auto t : chunk) calls += t == Message::CALL;
    if (!steady || !RecordingRelay::Has(chunk, Message::FINISH)) continue;
    ++finishes;
    EXPECT_TRUE(RecordingRelay::Has(chunk, Message::CALL))
        << "a Finish was sent alone, after call " << calls;
  }
  EXPECT_GE(finishes, 10u);
}

}  // namespace
}  // namespace dispatch::testing
