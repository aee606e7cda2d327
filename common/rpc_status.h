// The one mapping between dispatch::Status and kj::Exception at the RPC edge
// (the wire contract: schema/dispatcher.capnp's header, docs/users/errors.md).
// A failed call carries "<CodeName>: <message>" as its description
// (its `reason` on the wire), CodeName one of StatusCodeName's; the exception
// type is OVERLOADED for ResourceExhausted, DISCONNECTED for Unavailable and
// FAILED for every other code. A client turns it back into the same Status.
#pragma once

#include <kj/exception.h>

#include "common/status.h"

namespace dispatch {

// REQUIRES: !status.ok()
kj::Exception ExceptionFromStatus(const Status& status);
[[noreturn]] void ThrowStatus(const Status& status);
// The inverse of ExceptionFromStatus, with or without the "remote exception: "
// that Cap'n Proto's C++ runtime puts before a remote reason. An exception
// without a code prefix (from the RPC system itself: a dropped connection, an
// unknown method) maps by type: DISCONNECTED -> Unavailable, OVERLOADED ->
// ResourceExhausted, UNIMPLEMENTED -> InvalidArgument, FAILED -> Internal.
Status StatusFromException(const kj::Exception& exception);
// What a server method's exception becomes before it leaves for the peer:
// unchanged when its description already starts with "<CodeName>: ",
// UNIMPLEMENTED unchanged (Cap'n Proto's own "method not implemented"),
// "InvalidArgument: the message is malformed: ..." for a failure thrown by
// Cap'n Proto's message reading (the peer's message: a bad pointer, the
// traversal or nesting limit), and otherwise (a KJ_REQUIRE of a bug)
// ExceptionFromStatus of StatusFromException: "Internal: ..." for FAILED,
// "ResourceExhausted: ..." for OVERLOADED, "Unavailable: ..." for DISCONNECTED.
kj::Exception ExceptionForPeer(kj::Exception exception);

}  // namespace dispatch
