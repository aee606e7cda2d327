#include "reactor/rpc_metrics.h"

#include <uv.h>

#include "common/rpc_status.h"
#include "schema/dispatcher.capnp.h"

namespace dispatch::reactor {

RpcMetrics::RpcMetrics() {
  AddInterface(capnp::Schema::from<rpc::Gateway>());
  AddInterface(capnp::Schema::from<rpc::Dispatcher>());
  AddInterface(capnp::Schema::from<rpc::Coordinator>());
  unknown_interface_ = methods_.size();
  Method unknown;
  unknown.interface_name = "unknown";
  unknown.method_name = "unknown";
  methods_.push_back(std::move(unknown));
}

void RpcMetrics::AddInterface(capnp::InterfaceSchema schema) {
  kj::StringPtr full = schema.getProto().getDisplayName();
  // "dispatcher.capnp:Dispatcher" -> "Dispatcher"
  std::string name(full.cStr() + schema.getProto().getDisplayNamePrefixLength());
  auto list = schema.getMethods();
  interfaces_[schema.getProto().getId()] = {methods_.size(), list.size()};
  for (auto method : list) {
    Method m;
    m.interface_name = name;
    m.method_name = method.getProto().getName().cStr();
    methods_.push_back(std::move(m));
  }
  Method unknown;
  unknown.interface_name = name;
  unknown.method_name = "unknown";
  methods_.push_back(std::move(unknown));
}

size_t RpcMetrics::IndexOf(uint64_t interface_id, uint16_t method_id) const {
  auto it = interfaces_.find(interface_id);
  if (it == interfaces_.end()) return unknown_interface_;
  auto [first, count] = it->second;
  return first + (method_id < count ? method_id : count);
}

kj::Promise<void> RpcMetrics::Track(uint64_t interface_id, uint16_t method_id, kj::Promise<void> call) {
  ++calls_started_;
  const size_t index = IndexOf(interface_id, method_id);
  const uint64_t start = uv_hrtime();
  return call
      .then(
      [this, index, start]() -> kj::Promise<void> {
        Method& m = methods_[index];
        ++m.calls;
        m.latency.Observe(static_cast<double>(uv_hrtime() - start) * 1e-9);
        return kj::READY_NOW;
      },
      [this, index, start](kj::Exception&& e) -> kj::Promise<void> {
        Method& m = methods_[index];
        ++m.calls;
        m.latency.Observe(static_cast<double>(uv_hrtime() - start) * 1e-9);
        size_t code = static_cast<size_t>(StatusFromException(e).code());
        if (code < kNumCodes) ++m.errors[code];
        return kj::mv(e);
      })
      // The counters outlive every call that reports to them.
      .attach(kj::addRef(*this));
}

}  // namespace dispatch::reactor
