// A listening TCP socket on 127.0.0.1 at a port the kernel picks, for test
// relays and servers that stand between two real processes.
#pragma once

namespace dispatch::testing {

// The listening fd (the caller closes it) and its port in *port; throws
// std::runtime_error naming the failed call.
int ListenOnLoopback(int backlog, int* port);

}  // namespace dispatch::testing
