// The worker's transfer service under bad and repeated requests, spoken to
// directly over Cap'n Proto: malformed requests get clear errors, a repeated
// sequence gets the same reply, an unknown task is "not ready", and garbage
// bytes close only that connection.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include "tests/datapath/datapath_support.h"
#include "tests/datapath/transfer_client.h"
#include "tests/integration/client_loop.h"
#include "tests/support/raw_socket.h"

namespace dispatch::testing {
namespace {

TEST(TransferService, AnswersBadRequestsWithClearErrorsAndRepeatsALostReply) {
  DataCluster cluster;
  const std::string worker = cluster.StartWorker(0);
  // A consumer of its own keeps a task running on the worker.
  auto reader = clients::DatasetReader::Open(
      cluster.ReaderOf("range count=100000000 splits=10", rpc::ProcessingMode::OFF));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  clients::Element element;
  ASSERT_TRUE((*reader)->Next(&element, kTestDeadline).ok());
  const uint64_t task = element.task_id;

  ClientLoop loop;
  TransferClient client(loop, worker);
  std::string error;
  auto expect_error = [&](Ask ask, const std::string& needle) {
    error.clear();
    EXPECT_EQ(client.Get(ask, &error), nullptr) << "accepted, expected: " << needle;
    EXPECT_NE(error.find(needle), std::string::npos) << error;
  };
  expect_error(Ask{.task = task, .consumer = 0}, "consumerId must be nonzero");
  expect_error(Ask{.task = task, .sequence = 0}, "element sequence numbers start at 1");
  expect_error(Ask{.task = task, .consumer_index = 1, .round = 0}, "is not round robin");

  auto unknown = client.Get(Ask{.task = task + 1000}, &error);
  ASSERT_NE(unknown, nullptr) << error;
  KJ_IF_MAYBE (r, unknown) {
    EXPECT_EQ(r->getResult().getStatus(), rpc::ElementStatus::NOT_READY);
  }

  // Sequence 1, then 1 again (as after a lost reply): the same elements.
  auto first = client.Get(Ask{.task = task, .consumer = 7, .sequence = 1}, &error);
  auto again = client.Get(Ask{.task = task, .consumer = 7, .sequence = 1}, &error);
  ASSERT_NE(first, nullptr) << error;
  ASSERT_NE(again, nullptr) << error;
  KJ_IF_MAYBE (a, first) {
    KJ_IF_MAYBE (b, again) {
      ASSERT_EQ(a->getResult().getStatus(), rpc::ElementStatus::READY);
      EXPECT_EQ(ElementsOf(*a), ElementsOf(*b));
      EXPECT_EQ(ElementsOf(*a).size(), 4u);
    }
  }
  // The next sequence moves on; an older one is refused.
  auto next = client.Get(Ask{.task = task, .consumer = 7, .sequence = 2}, &error);
  ASSERT_NE(next, nullptr) << error;
  KJ_IF_MAYBE (a, first) {
    KJ_IF_MAYBE (n, next) {
      EXPECT_NE(ElementsOf(*a), ElementsOf(*n));
    }
  }
  expect_error(Ask{.task = task, .consumer = 7, .sequence = 1}, "older than its last one");

  // The single-element form hands out one element, whatever the ask.
  auto one = client.GetOne(Ask{.task = task, .consumer = 8, .max_elements = 100}, &error);
  ASSERT_NE(one, nullptr) << error;
  KJ_IF_MAYBE (r, one) {
    EXPECT_EQ(r->getResult().getStatus(), rpc::ElementStatus::READY);
    EXPECT_EQ(r->getResult().getElements().size(), 1u);
  }

  // Garbage bytes: that connection is closed, the worker serves on.
  RawSocket garbage(worker);
  std::string junk(256, '\xff');
  garbage.WriteAll(junk.data(), junk.size());
  EXPECT_TRUE(garbage.PeerClosesWithin(std::chrono::seconds(10)));
  auto after = client.Get(Ask{.task = task, .consumer = 7, .sequence = 3}, &error);
  EXPECT_NE(after, nullptr) << error;
  auto more = (*reader)->Next(&element, kTestDeadline);
  EXPECT_TRUE(more.ok() && *more) << more.status().ToString();
  (*reader)->Close();
}

TEST(TransferService, ClosesConnectionsBeyondItsLimitAndServesTheOthers) {
  DataCluster cluster;
  const std::string worker = cluster.StartWorker(0, {"--max-transfer-connections=2"});
  auto reader = clients::DatasetReader::Open(
      cluster.ReaderOf("range count=100000000 splits=10", rpc::ProcessingMode::OFF));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  clients::Element element;
  ASSERT_TRUE((*reader)->Next(&element, kTestDeadline).ok());  // the reader holds one connection
  ClientLoop loop;
  TransferClient second(loop, worker);  // the second: at the limit
  std::string error;
  ASSERT_NE(second.Get(Ask{.task = element.task_id, .consumer = 9}, &error), nullptr) << error;
  RawSocket third(worker);
  EXPECT_TRUE(third.PeerClosesWithin(std::chrono::seconds(10))) << "a third connection was kept";
  EXPECT_NE(second.Get(Ask{.task = element.task_id, .consumer = 9, .sequence = 2}, &error), nullptr)
      << error;
  auto more = (*reader)->Next(&element, kTestDeadline);
  EXPECT_TRUE(more.ok() && *more) << more.status().ToString();
  (*reader)->Close();
}

// SIGTERM while a consumer is connected and its getElements call waits for
// an element: the worker must close that connection and drop the held call
// on its loop thread and exit 0. (It once left them to the agent's
// destructor, after the loop had closed, and died of a double free or a
// segfault at exit.)
TEST(TransferService, StopsCleanlyOnSigtermWhileAGetElementsWaits) {
  DataCluster cluster;
  const std::string worker = cluster.StartWorker(0);
  ClientLoop loop;
  TransferClient client(loop, worker);
  // A task the worker does not run yet: the call waits up to its cap.
  auto held = client.Send(Ask{.task = 424242, .wait_ms = 60000});
  // Calls on one connection arrive in order: once a later one is answered,
  // the held one has reached the worker and waits there.
  std::string error;
  ASSERT_NE(client.Get(Ask{.task = 424243, .consumer = 8, .wait_ms = 0}, &error), nullptr) << error;
  cluster.worker(0).process().Signal(SIGTERM);
  auto status = cluster.worker(0).process().Wait(kTestDeadline);
  ASSERT_TRUE(status.has_value()) << "the worker did not stop";
  EXPECT_TRUE(WIFEXITED(*status)) << "the worker died of signal " << WTERMSIG(*status);
  if (WIFEXITED(*status)) {
    EXPECT_EQ(WEXITSTATUS(*status), 0);
  }
}

}  // namespace
}  // namespace dispatch::testing
