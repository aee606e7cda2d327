// Small helpers shared by the DispatcherService method files: a failed Status
// becomes the call's exception (common/rpc_status.h maps it), and Cap'n Proto
// blobs become the std::string / string_view the state speaks.
#pragma once

#include <capnp/blob.h>
#include <capnp/capability.h>

#include <string>
#include <string_view>
#include <utility>

#include "common/rpc_status.h"
#include "common/status.h"

namespace dispatch::reactor {

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

// Runs a generated dispatchCall so that every exception the call ends with,
// thrown at once or later, carries a "<CodeName>: " prefix (ExceptionForPeer):
// the wire contract promises one on every failed call of the Dispatcher and
// Coordinator interfaces.
template <typename Dispatch>
capnp::Capability::Server::DispatchCallResult DispatchWithPeerErrors(Dispatch&& dispatch) {
  capnp::Capability::Server::DispatchCallResult result{nullptr, false};
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { result = dispatch(); })) {
    return {ExceptionForPeer(kj::mv(*e)), false};
  }
  result.promise = result.promise.catch_(
      [](kj::Exception&& e) -> kj::Promise<void> { return ExceptionForPeer(kj::mv(e)); });
  return result;
}

inline std::string_view View(capnp::Text::Reader text) {
  return std::string_view(text.cStr(), text.size());
}
inline std::string_view View(capnp::Data::Reader data) {
  return std::string_view(reinterpret_cast<const char*>(data.begin()), data.size());
}

}  // namespace dispatch::reactor
