#include "clients/dispatchctl_connect.h"

#include <stdio.h>

#include "common/rpc_status.h"
#include "reactor/uvkj/uv_handle.h"

namespace dispatch::clients {

kj::Promise<kj::Own<DispatcherConnection>> ConnectForCommand(kj::Network& network,
                                                             const std::string& address,
                                                             const std::string& token) {
  return DispatcherConnection::Connect(network, address, token)
      .catch_([address](kj::Exception&& e) -> kj::Own<DispatcherConnection> {
        Status s = StatusFromException(e);
        // A refused token, a bad address or a dispatcher that no longer
        // serves this client's protocol: no retry cures them.
        if (s.code() == StatusCode::kUnauthenticated || s.code() == StatusCode::kInvalidArgument ||
            s.code() == StatusCode::kFailedPrecondition) {
          kj::throwFatalException(kj::mv(e));
        }
        ThrowStatus(UnavailableError("cannot reach the dispatcher at " + address + ": " + s.message()));
      });
}

int RunCommandOnLoop(const std::function<void(uvkj::UvAsyncIo& io)>& body) {
  Status status;
  uvkj::UvLoop loop;
  {
    uvkj::UvAsyncIo io(loop.get());
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&]() { body(io); })) {
      status = StatusFromException(*e);
    }
    io.wait_scope().poll();
  }
  loop.Close();
  if (!status.ok()) {
    fprintf(stderr, "dispatchctl: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace dispatch::clients
