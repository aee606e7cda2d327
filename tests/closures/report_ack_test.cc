// The answer to a report from a worker left with no closure running is held
// until the next push to that worker (one write, one wake-up of the worker
// for both) or until --closure-report-ack-hold-ms passes. Observed on the
// wire through a relay between a real worker agent and the real dispatcher,
// and at the agent, whose count of acknowledged report calls moves only when
// an answer arrives.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/closures/closure_test_support.h"
#include "tests/support/recording_relay.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using capnp::rpc::Message;
using clients::WorkerAgentStatus;
using From = RecordingRelay::From;

// Sequential round trips: every report leaves the worker idle, and the next
// closure's push is what carries the answer to it. Without the hold each
// answer is a write of its own, one per closure.
TEST(ReportAck, AnIdleWorkersAnswerTravelsWithTheNextPush) {
  ClosureDispatcher dispatcher({"--closure-report-ack-hold-ms=60000"});
  RecordingRelay relay(dispatcher.address());
  auto agent = StartEchoAgent(relay.address(), "agent-report-ack");
  auto coordinator = MakeCoordinator(dispatcher.address());
  constexpr int kClosures = 30;
  size_t chunks_before = 0;
  uint64_t heartbeats_before = 0;
  for (int i = 0; i < kClosures; ++i) {
    if (i == 1) {
      chunks_before = relay.chunks(From::kServer).size();
      heartbeats_before = agent->status().heartbeats;
    }
    auto value = coordinator->Schedule("echo", std::to_string(i));
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    ASSERT_EQ(FetchOrDie(*value), std::to_string(i));
  }
  // Every answer but the last one's has reached the agent, with a push.
  EXPECT_TRUE(agent->WaitFor(
      [](const WorkerAgentStatus& s) { return s.closure_report_calls >= kClosures - 1; },
      kTestDeadline));
  const uint64_t heartbeats = agent->status().heartbeats - heartbeats_before;
  EXPECT_EQ(relay.failure(), "");
  const auto chunks = relay.chunks(From::kServer);
  // Writes to the worker that answer something and push nothing: heartbeat
  // answers (and one in flight either side of the window).
  size_t answers_alone = 0;
  for (size_t i = chunks_before; i < chunks.size(); ++i) {
    answers_alone += RecordingRelay::Has(chunks[i], Message::RETURN) &&
                     !RecordingRelay::Has(chunks[i], Message::CALL);
  }
  EXPECT_LE(answers_alone, heartbeats + 2)
      << "report answers went to the idle worker alone (" << heartbeats << " heartbeats)";
  agent->Stop();
}

// No push comes: the hold timer answers.
TEST(ReportAck, WithNoPushTheHoldTimerAnswers) {
  ClosureDispatcher dispatcher({"--closure-report-ack-hold-ms=20"});
  auto agent = StartEchoAgent(dispatcher.address(), "agent-report-ack");
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto value = coordinator->Schedule("echo", "once");
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  ASSERT_EQ(FetchOrDie(*value), "once");
  EXPECT_TRUE(agent->WaitFor(
      [](const WorkerAgentStatus& s) { return s.closure_report_calls == 1; }, kTestDeadline));
  agent->Stop();
}

// A held answer does not hold up SIGTERM's drain: it is sent at once, and
// the worker has it before the connection closes.
TEST(ReportAck, ShutdownAnswersWhatIsHeld) {
  TempDir dir;
  const std::string log = dir.File("stderr");
  DispatcherProcess dispatcher({.extra_flags = {"--closure-report-ack-hold-ms=60000", "--log-level=info",
                                                "--drain-timeout-ms=60000"},
                                .stderr_path = log});
  auto agent = StartEchoAgent(dispatcher.address(), "agent-report-ack");
  auto coordinator = MakeCoordinator(dispatcher.address());
  auto value = coordinator->Schedule("echo", "held");
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  ASSERT_EQ(FetchOrDie(*value), "held");
  // The result is fetched, so the report is committed; its answer is held
  // (a minute), and the agent counts a report call only once answered.
  EXPECT_EQ(agent->status().closure_report_calls, 0u);
  const auto exit = dispatcher.Terminate(std::chrono::seconds(30));
  ASSERT_TRUE(exit.has_value()) << "the drain waited for a held answer";
  EXPECT_TRUE(agent->WaitFor(
      [](const WorkerAgentStatus& s) { return s.closure_report_calls == 1; }, kTestDeadline));
  agent->Stop();
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("drain deadline passed"), std::string::npos) << text;
  EXPECT_NE(text.find("shutdown complete"), std::string::npos) << text;
}

}  // namespace
}  // namespace dispatch::testing
