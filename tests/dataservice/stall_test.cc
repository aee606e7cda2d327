// The dispatcher's own stalls are not its peers' silence: a dispatcher
// stopped (SIGSTOP: as a slow fsync or a starved process would stall it) for
// longer than the client and worker timeouts releases no client and removes
// no worker for the time it was not listening. Peers silent for a timeout of
// the time it was serving still go.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>

#include "tests/dataservice/ds_test_util.h"
#include "tests/support/hold_fault.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

bool HasClient(DsClient& client, uint64_t id) {
  auto clients = client.ListJobClients();
  return clients.ok() && std::find(clients->begin(), clients->end(), id) != clients->end();
}

bool HasWorker(DsClient& client, const std::string& address) {
  auto workers = client.GetWorkers();
  if (!workers.ok()) return false;
  return std::any_of(workers->begin(), workers->end(),
                     [&](const WorkerView& w) { return w.address == address; });
}

TEST(Stalls, ADispatcherThatStoodStillBlamesNoPeerForTheSilenceItCaused) {
  // Timeouts of 3 s; liveness checked every 750 ms.
  DispatcherProcess dispatcher({.extra_flags = {"--client-timeout-ms=3000",
                                                "--worker-timeout-ms=3000",
                                                "--worker-heartbeat-interval-ms=1000"}});
  ClientLoop loop;
  DsClient client(loop, dispatcher.address());
  const uint64_t dataset = *client.RegisterDataset({.definition = "d"});
  // `lapsed` and `quiet` speak first and never again ...
  const JobIds lapsed = *client.GetOrCreateJob({.dataset_id = dataset});
  SimWorker quiet(loop, dispatcher.address(), "quiet");
  ASSERT_TRUE(quiet.Heartbeat().ok());
  HoldFault(1500ms);
  // ... `kept` and `steady` 1.5 s later, just before the dispatcher stops.
  const JobIds kept = *client.GetOrCreateJob({.dataset_id = dataset});
  SimWorker steady(loop, dispatcher.address(), "steady");
  ASSERT_TRUE(steady.Heartbeat().ok());

  dispatcher.process().Signal(SIGSTOP);
  HoldFault(4000ms);  // longer than both timeouts
  dispatcher.process().Signal(SIGCONT);

  // Counting only the time it served, `lapsed` and `quiet` pass their
  // timeouts 1.5 s before `kept` and `steady` do: the first go, the others
  // are still there when they have gone. (Counting the stall too, all four
  // were gone at the first check after it.)
  ASSERT_TRUE(WaitUntil(
      [&] { return !HasClient(client, lapsed.job_client_id) && !HasWorker(client, "quiet"); },
      loop));
  EXPECT_TRUE(HasClient(client, kept.job_client_id));
  EXPECT_TRUE(HasWorker(client, "steady"));
  EXPECT_TRUE(client.ClientHeartbeat(kept.job_client_id).ok());
  EXPECT_TRUE(steady.Heartbeat().ok());
}

}  // namespace
}  // namespace dispatch::testing
