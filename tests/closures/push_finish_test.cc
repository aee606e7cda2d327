// The dispatcher keeps each runClosures reply until its next push to that
// worker, so the Finish message Cap'n Proto owes the worker for the reply
// travels in the same write as the next push: the worker is not woken for a
// Finish of its own, and the dispatcher makes no system call for it on the
// way from the report to its commit. Observed on the wire through a relay
// between a real worker agent and the real dispatcher.
#include <gtest/gtest.h>

#include <string>

#include "tests/closures/closure_test_support.h"
#include "tests/support/recording_relay.h"

namespace dispatch::testing {
namespace {

using capnp::rpc::Message;
using From = RecordingRelay::From;

TEST(PushFinish, TravelsWithTheNextPushNeverAlone) {
  ClosureDispatcher dispatcher;
  RecordingRelay relay(dispatcher.address());
  auto agent = MakeAgent(relay.address(), "agent-push-finish", 1);
  ASSERT_TRUE(agent
                  ->RegisterFunction("echo",
                                     [](const clients::ClosureCall& call) {
                                       return clients::ClosureOutput::Result(std::string(call.args()));
                                     })
                  .ok());
  ASSERT_TRUE(agent->Start().ok());
  ASSERT_TRUE(agent->WaitFor([](const clients::WorkerAgentStatus& s) { return s.registered; },
                             kTestDeadline));
  auto coordinator = MakeCoordinator(dispatcher.address());
  // One at a time: each push's reply is back long before the next push.
  constexpr int kClosures = 20;
  size_t calls_before = 0;
  for (int i = 0; i < kClosures; ++i) {
    if (i == 1) calls_before = RecordingRelay::Count(relay.chunks(From::kServer), Message::CALL);
    auto value = coordinator->Schedule("echo", std::to_string(i));
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    ASSERT_EQ(FetchOrDie(*value), std::to_string(i));
  }
  agent->Stop();
  EXPECT_EQ(relay.failure(), "");
  const auto chunks = relay.chunks(From::kServer);
  // The dispatcher's calls to the worker are the pushes; judged from the
  // second one on, whose Finish the first push's reply owes.
  EXPECT_GE(RecordingRelay::Count(chunks, Message::CALL), calls_before + kClosures - 1);
  size_t calls = 0, finishes = 0;
  for (const RecordingRelay::Chunk& chunk : chunks) {
    const bool judged = calls > calls_before;
    for (auto t : chunk) calls += t == Message::CALL;
    if (!judged || !RecordingRelay::Has(chunk, Message::FINISH)) continue;
    ++finishes;
    EXPECT_TRUE(RecordingRelay::Has(chunk, Message::CALL))
        << "a Finish was sent to the worker alone, after call " << calls;
  }
  EXPECT_GE(finishes, static_cast<size_t>(kClosures - 2));
}

}  // namespace
}  // namespace dispatch::testing
