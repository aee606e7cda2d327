// A store and the DurableState recovered from it, opened in process on a
// fresh or existing work dir: what the reactor's durability tests start from.
#pragma once

#include <uv.h>

#include <memory>

#include "reactor/durable_state.h"
#include "storage/store.h"

namespace dispatch::reactor {

struct Opened {
  std::unique_ptr<storage::Store> store;
  std::unique_ptr<DurableState> durable;
};

// Opens the store with `store_options`, then recovers the state from it.
// A failure of either is a test failure; the fields it left null stay null.
Opened OpenDurable(uv_loop_t* loop, const storage::StoreOptions& store_options,
                   DurableStateOptions options = {});

// Store options for `dir` with synchronous=NORMAL: tests about the logic, not
// about what survives a power cut, need no fsync of every commit.
storage::StoreOptions LogicStoreOptions(const std::string& dir);

}  // namespace dispatch::reactor
