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

RpcMetrics::CallStart RpcMetrics::Begin(uint64_t interface_id, uint16_t method_id) {
  ++calls_started_;
  return CallStart{IndexOf(interface_id, method_id), uv_hrtime()};
}

void RpcMetrics::End(const CallStart& call, const kj::Exception* failure) {
  Method& m = methods_[call.index];
  ++m.calls;
  m.latency.Observe(static_cast<double>(uv_hrtime() - call.start_ns) * 1e-9);
  if (failure != nullptr) {
    size_t code = static_cast<size_t>(StatusFromException(*failure).code());
    if (code < kNumCodes) ++m.errors[code];
  }
}

kj::Promise<void> RpcMetrics::Track(uint64_t interface_id, uint16_t method_id, kj::Promise<void> call) {
  const CallStart start = Begin(interface_id, method_id);
  return call
      .then([this, start]() { End(start, nullptr); },
            [this, start](kj::Exception&& e) {
              End(start, &e);
              kj::throwFatalException(kj::mv(e));
            })
      // The counters outlive every call that reports to them.
      .attach(kj::addRef(*this));
}

}  // namespace dispatch::reactor
