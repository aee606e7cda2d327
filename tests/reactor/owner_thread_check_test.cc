// One thread owns the state: with the dispatcher running in-process on a
// thread of its own, every RPC handler and timer callback must run on the
// thread that called uv_run, whoever the callers are.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "reactor/dispatcher_server.h"
#include "tests/integration/client_loop.h"
#include "tests/support/temp_dir.h"

namespace dispatch::reactor {
namespace {

TEST(OwnerThreadCheck, EveryHandlerAndTimerRunsOnTheThreadThatCalledUvRun) {
  testing::TempDir dir;
  std::promise<std::string> address_promise;
  std::promise<const kj::Executor*> executor_promise;
  std::thread::id server_thread_id;
  DispatcherServer* server_ptr = nullptr;

  std::thread server_thread([&]() {
    server_thread_id = std::this_thread::get_id();
    uvkj::UvLoop loop;
    {
      uvkj::UvAsyncIo io(loop.get());
      DispatcherOptions options;
      options.listen = "tcp:127.0.0.1:0";
      options.work_dir = dir.File("work");
      options.tick_ms = 5;
      {
        DispatcherServer server(io, options);
        server_ptr = &server;
        auto bound = server.Start();
        executor_promise.set_value(&kj::getCurrentThreadExecutor());
        address_promise.set_value(bound.ok() ? *bound : "");
        io.Run();
      }
      io.wait_scope().poll();
    }
    EXPECT_EQ(loop.Close(), 0);
  });

  std::string address = address_promise.get_future().get();
  const kj::Executor* executor = executor_promise.get_future().get();
  ASSERT_FALSE(address.empty());
  {
    testing::ClientLoop client;
    kj::Vector<kj::Own<clients::DispatcherConnection>> conns;
    for (int i = 0; i < 16; ++i) conns.add(client.Connect(address));
    kj::Vector<kj::Promise<void>> calls;
    for (auto& conn : conns) {
      for (int i = 0; i < 50; ++i) {
        calls.add(conn->dispatcher().pingRequest().send().ignoreResult());
        calls.add(conn->dispatcher().getVersionRequest().send().ignoreResult());
      }
    }
    client.Wait(kj::joinPromises(calls.releaseAsArray()));
    // Let the housekeeping timer fire a few times too.
    uint64_t ticks = 0;
    ASSERT_TRUE(testing::WaitUntil(
        [&] {
          ticks = client.Wait(conns[0]->dispatcher().getServerStatsRequest().send())
                      .getStats()
                      .getTicks();
          return ticks >= 5;
        },
        client));
    auto stats = client.Wait(conns[0]->dispatcher().getServerStatsRequest().send());
    EXPECT_EQ(stats.getStats().getLoopThreadId(), std::hash<std::thread::id>()(server_thread_id));
    EXPECT_EQ(stats.getStats().getCallbacksOffLoopThread(), 0u);
    EXPECT_GE(stats.getStats().getCallsTotal(), 16u * 100u);
  }
  // Shut down from this thread the only legal way: run it on the loop thread.
  executor->executeSync([&]() { server_ptr->BeginShutdown("test done"); });
  server_thread.join();
}

}  // namespace
}  // namespace dispatch::reactor
