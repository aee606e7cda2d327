// Blocking dataset calls for programs without a loop of their own (the Python
// package): each opens one connection on a short-lived LoopThread, makes its
// call and closes again. Errors are the dispatcher's (InvalidArgument for a
// bad definition, NotFound for an unknown dataset, ...), Unauthenticated for a
// refused token, and Unavailable when no answer came within `timeout`.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "clients/dataset_client.h"
#include "common/status.h"

namespace dispatch::clients {

struct DispatcherEndpoint {
  std::string address;  // "tcp:HOST:PORT" or "unix:PATH", or a comma-separated list
  std::string token;
  std::chrono::milliseconds timeout{30000};
};

// getOrRegisterDataset: the same spec gives the same id.
Result<RegisteredDataset> RegisterDatasetAndWait(const DispatcherEndpoint& endpoint,
                                                 const DatasetSpec& spec);

// getElementSpec: the element spec registered with the dataset (empty: none).
Result<std::string> GetElementSpecAndWait(const DispatcherEndpoint& endpoint,
                                          uint64_t dataset_id);

}  // namespace dispatch::clients
