// The dispatcher under RPC load from real clients: long sequential runs,
// many concurrent connections, and its housekeeping timer still firing while
// the load runs (the loop is never starved).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "tests/integration/client_loop.h"
#include "tests/support/dispatcher_process.h"
#include "tests/support/test_seed.h"

namespace dispatch::testing {
namespace {

kj::Array<kj::byte> RandomPayload(std::mt19937_64& rng, size_t max_size) {
  auto payload = kj::heapArray<kj::byte>(rng() % (max_size + 1));
  for (auto& b : payload) b = static_cast<kj::byte>(rng());
  return payload;
}

rpc::ServerStats::Reader Stats(ClientLoop& loop, clients::DispatcherConnection& conn,
                               kj::Own<capnp::Response<rpc::Dispatcher::GetServerStatsResults>>& keep) {
  keep = kj::heap(loop.Wait(conn.dispatcher().getServerStatsRequest().send()));
  return keep->getStats();
}

TEST(RpcLoad, TenThousandSequentialPingsEchoTheirPayloads) {
  std::mt19937_64 rng(TestSeed());
  DispatcherProcess dispatcher;
  ClientLoop loop;
  auto conn = loop.Connect(dispatcher.address());
  for (int i = 0; i < 10000; ++i) {
    auto payload = RandomPayload(rng, 256);
    auto request = conn->dispatcher().pingRequest();
    request.setPayload(payload);
    auto response = loop.Wait(request.send());
    ASSERT_EQ(response.getPayload(), payload.asPtr()) << "ping " << i;
  }
  kj::Own<capnp::Response<rpc::Dispatcher::GetServerStatsResults>> stats;
  EXPECT_GE(Stats(loop, *conn, stats).getCallsTotal(), 10000u);
}

TEST(RpcLoad, SixtyFourConcurrentClientsAllGetTheirOwnReplies) {
  constexpr int kClients = 64;
  constexpr int kPingsEach = 200;
  DispatcherProcess dispatcher;
  ClientLoop loop;

  kj::Vector<kj::Own<clients::DispatcherConnection>> conns;
  for (int i = 0; i < kClients; ++i) conns.add(loop.Connect(dispatcher.address()));

  // Each client runs its own chain of sequential pings; all chains run at
  // once, interleaved on the server's one loop. A reply delivered to the
  // wrong client or out of order fails the payload check.
  int completed = 0;
  kj::Vector<kj::Promise<void>> chains;
  for (int c = 0; c < kClients; ++c) {
    auto& dispatcher_cap = conns[c]->dispatcher();
    kj::Promise<void> chain = kj::READY_NOW;
    for (int i = 0; i < kPingsEach; ++i) {
      chain = chain.then([&dispatcher_cap, c, i, &completed]() {
        auto request = dispatcher_cap.pingRequest();
        auto payload = kj::heapArray<kj::byte>(8);
        payload[0] = static_cast<kj::byte>(c);
        payload[1] = static_cast<kj::byte>(i);
        payload[2] = static_cast<kj::byte>(i >> 8);
        request.setPayload(payload);
        return request.send().then([payload = kj::mv(payload), &completed](auto response) {
          KJ_ASSERT(response.getPayload() == payload.asPtr(), "reply carries another call's payload");
          ++completed;
        });
      });
    }
    chains.add(kj::mv(chain));
  }
  loop.Wait(kj::joinPromises(chains.releaseAsArray()));
  EXPECT_EQ(completed, kClients * kPingsEach);

  kj::Own<capnp::Response<rpc::Dispatcher::GetServerStatsResults>> stats;
  auto s = Stats(loop, *conns[0], stats);
  EXPECT_EQ(s.getConnectionsOpen(), static_cast<uint32_t>(kClients));
  EXPECT_GE(s.getConnectionsAccepted(), static_cast<uint64_t>(kClients));
}

TEST(RpcLoad, HousekeepingTimerKeepsFiringWhileRpcLoadRuns) {
  DispatcherProcess dispatcher({.extra_flags = {"--tick-ms=20"}});
  ClientLoop loop;
  auto probe = loop.Connect(dispatcher.address());

  // Eight clients keep 64 pipelined pings each in flight until told to stop.
  bool stop = false;
  uint64_t pings = 0;
  kj::Vector<kj::Own<clients::DispatcherConnection>> loaders;
  kj::Vector<kj::Promise<void>> load;
  std::function<kj::Promise<void>(rpc::Dispatcher::Client&)> pump;
  pump = [&](rpc::Dispatcher::Client& cap) -> kj::Promise<void> {
    if (stop) return kj::READY_NOW;
    auto request = cap.pingRequest();
    request.setPayload(kj::heapArray<kj::byte>(512));
    return request.send().then([&](auto) {
      ++pings;
      return pump(cap);
    });
  };
  for (int c = 0; c < 8; ++c) {
    loaders.add(loop.Connect(dispatcher.address()));
    for (int k = 0; k < 64; ++k) load.add(pump(loaders.back()->dispatcher()));
  }
  auto all_load = kj::joinPromises(load.releaseAsArray()).fork();

  kj::Own<capnp::Response<rpc::Dispatcher::GetServerStatsResults>> stats;
  // Let the load build up before the first sample.
  ASSERT_TRUE(WaitUntil([&] { return pings >= 2000; }, loop));
  uint64_t ticks_at_start = Stats(loop, *probe, stats).getTicks();
  uint64_t pings_at_start = pings;
  // Under load the tick counter must keep advancing (a starved timer would
  // stall it), and the load must keep flowing while it does.
  ASSERT_TRUE(
      WaitUntil([&] { return Stats(loop, *probe, stats).getTicks() >= ticks_at_start + 10; }, loop))
      << "the housekeeping timer stopped firing under load";
  EXPECT_GT(pings, pings_at_start);
  printf("ticks %llu -> %llu while %llu pings completed; worst tick lateness %llu us\n",
         static_cast<unsigned long long>(ticks_at_start),
         static_cast<unsigned long long>(stats->getStats().getTicks()),
         static_cast<unsigned long long>(pings - pings_at_start),
         static_cast<unsigned long long>(stats->getStats().getMaxTickLatenessMicros()));
  stop = true;
  loop.Wait(all_load.addBranch());
}

}  // namespace
}  // namespace dispatch::testing
