#include "tests/reactor/opened_durable.h"

#include <gtest/gtest.h>

#include <utility>

namespace dispatch::reactor {

Opened OpenDurable(uv_loop_t* loop, const storage::StoreOptions& store_options,
                   DurableStateOptions options) {
  Opened opened;
  auto store = storage::Store::Open(store_options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return opened;
  opened.store = std::move(store).value();
  auto durable = DurableState::Recover(loop, *opened.store, std::move(options));
  EXPECT_TRUE(durable.ok()) << durable.status().ToString();
  if (durable.ok()) opened.durable = std::move(durable).value();
  return opened;
}

storage::StoreOptions LogicStoreOptions(const std::string& dir) {
  storage::StoreOptions options;
  options.work_dir = dir;
  options.synchronous = storage::Synchronous::kNormal;
  return options;
}

}  // namespace dispatch::reactor
