// Endpoint addresses as users write them: "tcp:HOST:PORT" or "unix:PATH".
// KJ's network wants "HOST:PORT" and "unix:PATH"; this is the one place that
// translates and names a malformed address.
#pragma once

#include <string>

#include "common/status.h"

namespace dispatch {

Result<std::string> ToKjAddress(const std::string& address);

}  // namespace dispatch
