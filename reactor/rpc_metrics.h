// RpcMetrics: per RPC method of the interfaces the dispatcher serves
// (Gateway, Dispatcher, Coordinator): calls, failed calls by error code and a
// latency histogram from the call's arrival to its reply (the commit barrier
// included, which is what a peer waits for). The method table is built once
// from the schema, so peers cannot grow it: a method id the schema does not
// know counts under the method name "unknown" of its interface.
// Refcounted: coordinator sessions hold it as long as they live.
// REQUIRES: loop thread only.
#pragma once

#include <capnp/schema.h>
#include <kj/async.h>
#include <kj/refcount.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "reactor/histogram.h"

namespace dispatch::reactor {

class RpcMetrics final : public kj::Refcounted {
 public:
  // Status codes a failed call may carry (StatusCode values, kOk unused).
  static constexpr size_t kNumCodes = static_cast<size_t>(StatusCode::kDeadlineExceeded) + 1;

  struct Method {
    std::string interface_name;  // "Dispatcher"
    std::string method_name;     // "workerHeartbeat", or "unknown"
    uint64_t calls = 0;          // ended calls, failed ones included
    std::array<uint64_t, kNumCodes> errors{};  // failed calls by StatusCode
    Histogram latency{Histogram::SecondsBounds()};
  };

  RpcMetrics();

  // Counts the call and, when `call` ends, its latency since now and its
  // outcome. The exception of a failed call passes through unchanged.
  kj::Promise<void> Track(uint64_t interface_id, uint16_t method_id, kj::Promise<void> call);

  const std::vector<Method>& methods() const { return methods_; }
  uint64_t calls_started() const { return calls_started_; }

 private:
  void AddInterface(capnp::InterfaceSchema schema);
  size_t IndexOf(uint64_t interface_id, uint16_t method_id) const;

  std::vector<Method> methods_;
  // interface id -> (index of its method 0, method count); its "unknown"
  // entry follows its last method.
  std::map<uint64_t, std::pair<size_t, size_t>> interfaces_;
  size_t unknown_interface_ = 0;
  uint64_t calls_started_ = 0;
};

}  // namespace dispatch::reactor
