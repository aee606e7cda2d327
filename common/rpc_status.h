// The one mapping between dispatch::Status and kj::Exception at the RPC edge.
// A failed call carries "<CodeName>: <message>" as its description, so a
// client turns it back into the same Status; DISCONNECTED and OVERLOADED
// exceptions map to Unavailable and ResourceExhausted.
#pragma once

#include <kj/exception.h>

#include "common/status.h"

namespace dispatch {

// REQUIRES: !status.ok()
kj::Exception ExceptionFromStatus(const Status& status);
[[noreturn]] void ThrowStatus(const Status& status);
Status StatusFromException(const kj::Exception& exception);

}  // namespace dispatch
