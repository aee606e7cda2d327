// Endpoint addresses as users write them: "tcp:HOST:PORT" or "unix:PATH".
// KJ's network wants "HOST:PORT" and "unix:PATH"; this is the one place that
// translates and names a malformed address.
#pragma once

#include <string>

#include "common/status.h"

namespace dispatch {

Result<std::string> ToKjAddress(const std::string& address);

// True when only this machine can reach `address`: a Unix socket, or TCP on
// localhost, 127.0.0.0/8 or ::1. Any other host (0.0.0.0, a name, an
// interface address) counts as reachable from elsewhere.
// REQUIRES: ToKjAddress(address) succeeded.
bool IsLocalOnlyAddress(const std::string& address);

// True for "tcp:HOST:0": an address whose port the kernel picks when a socket
// binds it, so the address to give out is known only after the bind.
bool IsTcpPortZero(const std::string& address);

}  // namespace dispatch
