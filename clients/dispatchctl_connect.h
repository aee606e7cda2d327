// What every dispatchctl command does around its own work: a loop of its
// own, the connection, and one line on stderr when it fails.
#pragma once

#include <kj/async.h>
#include <kj/async-io.h>

#include <functional>
#include <string>

#include "clients/dispatcher_connection.h"
#include "reactor/uvkj/async_io.h"

namespace dispatch::clients {

// Connects to `address`. A refused token or a malformed address keeps its
// own error; any other failure becomes Unavailable naming the address.
kj::Promise<kj::Own<DispatcherConnection>> ConnectForCommand(kj::Network& network,
                                                             const std::string& address,
                                                             const std::string& token);

// Runs `body` with a fresh loop's I/O; whatever it throws is printed as
// "dispatchctl: STATUS" on stderr. Returns 0, or 1 when it threw.
int RunCommandOnLoop(const std::function<void(uvkj::UvAsyncIo& io)>& body);

}  // namespace dispatch::clients
