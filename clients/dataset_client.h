// Dataset registration for consumers: a dataset is opaque bytes plus a split
// source the dispatcher hands out for dynamic sharding. Registering the same
// definition twice returns the same id (the dispatcher dedups by fingerprint).
// Loop-thread functions over an authenticated rpc::Dispatcher::Client.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <string>
#include <vector>

#include "schema/dispatcher.capnp.h"

namespace dispatch::clients {

struct DatasetSpec {
  std::string definition;
  // Split source for DYNAMIC jobs: `num_splits` > 0 for N indexed splits,
  // or explicit payloads (e.g. file names); neither: no dynamic sharding.
  uint64_t num_splits = 0;
  std::vector<std::string> explicit_splits;
  std::string element_spec;  // empty: none
  std::string metadata;
};

struct RegisteredDataset {
  uint64_t dataset_id = 0;
  uint64_t incarnation = 0;
};

kj::Promise<RegisteredDataset> RegisterDataset(rpc::Dispatcher::Client dispatcher,
                                               const DatasetSpec& spec);

}  // namespace dispatch::clients
