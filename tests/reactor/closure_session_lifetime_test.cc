// Coordinator sessions and the closure dispatcher they talk to end in either
// order. capnp may keep a session (and a call of it) after its connection
// went, so the dispatcher is shared with its sessions: when DataService goes
// (shutdown), the calls waiting on the dispatcher (for queue room, results,
// a join) fail at once instead of hanging, later calls fail with
// Unavailable, and the session still leaves cleanly. The loop then closes
// with nothing left open.
#include <capnp/capability.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "reactor/coordinator_session.h"
#include "reactor/data_service.h"
#include "reactor/durable_state.h"
#include "reactor/uvkj/async_io.h"
#include "reactor/uvkj/uv_handle.h"
#include "storage/store.h"
#include "tests/support/loop_passes.h"
#include "tests/support/temp_dir.h"

namespace dispatch::reactor {
namespace {

// How a call ended: pending, answered, or failed (with its description).
struct Ending {
  bool done = false;
  bool failed = false;
  std::string error;
};

template <typename Promise>
kj::Promise<void> Watch(Promise&& promise, Ending& ending) {
  return promise
      .then([&ending](auto&&) { ending.done = true; },
            [&ending](kj::Exception&& e) {
              ending.done = ending.failed = true;
              ending.error = e.getDescription().cStr();
            })
      .eagerlyEvaluate(nullptr);
}

TEST(ClosureSessionLifetime, ASessionOutlivingTheDispatcherHasItsWaitingCallsCancelled) {
  testing::TempDir dir;
  uvkj::UvLoop loop;
  {
    uvkj::UvAsyncIo io(loop.get());
    storage::StoreOptions store_options;
    store_options.work_dir = dir.path();
    store_options.synchronous = storage::Synchronous::kNormal;
    auto store = storage::Store::Open(store_options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto durable = DurableState::Recover(loop.get(), **store, {.snapshot_every = 0});
    ASSERT_TRUE(durable.ok()) << durable.status().ToString();
    io.port().SetPassEndHook([&]() { (*durable)->EndOfPass(); });
    DataServiceOptions options;
    options.closures.max_queued_closures = 1;  // a second closure waits for room
    auto data = std::make_unique<DataService>(loop.get(), **durable, options, 1);
    ASSERT_TRUE(data->Start().ok());

    rpc::Coordinator::Client coordinator =
        kj::heap<CoordinatorSession>(kj::addRef(data->closures()), 7);
    auto schedule = [&]() {
      auto request = coordinator.scheduleRequest();
      request.initClosures(1)[0].setFunction("noop");
      return request.send();
    };
    Ending first, room, results, joined;
    auto first_call = Watch(schedule(), first);
    ASSERT_TRUE(dispatch::testing::WaitUntil([&]() { return first.done; },
                                             dispatch::testing::LoopPasses(io)));
    ASSERT_FALSE(first.failed) << first.error;
    // No worker runs the queued closure: each of these waits on the dispatcher.
    auto room_call = Watch(schedule(), room);
    auto results_call = Watch(coordinator.awaitResultsRequest().send(), results);
    auto join_request = coordinator.joinRequest();
    join_request.setWait(true);
    auto join_call = Watch(join_request.send(), joined);
    io.Run(UV_RUN_NOWAIT);
    ASSERT_FALSE(room.done || results.done || joined.done);

    data = nullptr;  // shutdown: the session (held by `coordinator`) stays
    ASSERT_TRUE(
        dispatch::testing::WaitUntil([&]() { return room.done && results.done && joined.done; },
                                     dispatch::testing::LoopPasses(io)))
        << "a call waiting on the dispatcher still waits after it closed";
    for (const Ending* ending : {&room, &results, &joined}) {
      EXPECT_TRUE(ending->failed);
      EXPECT_NE(ending->error.find("shutting down"), std::string::npos) << ending->error;
    }
    Ending later;
    auto later_call = Watch(coordinator.joinRequest().send(), later);
    ASSERT_TRUE(dispatch::testing::WaitUntil([&]() { return later.done; },
                                             dispatch::testing::LoopPasses(io)));
    EXPECT_TRUE(later.failed);
    EXPECT_NE(later.error.find("shutting down"), std::string::npos) << later.error;

    // The session goes last, and with it the dispatcher it held.
    coordinator = nullptr;
    io.Run(UV_RUN_NOWAIT);
    io.port().SetPassEndHook(nullptr);
  }
  EXPECT_EQ(loop.Close(), 0);
}

}  // namespace
}  // namespace dispatch::reactor
