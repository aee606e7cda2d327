// Journal records and snapshots as flat Cap'n Proto bytes: the form storage/
// keeps them in (opaque to it) and the reactor hands over. Decoding checks the
// whole message (bounds, nesting, no trailing bytes) before Check or Apply
// reads a field, so a damaged record is refused with DataLoss and changes
// nothing; it never throws.
#pragma once

#include <capnp/message.h>

#include <string>
#include <string_view>

#include "common/status.h"
#include "state/dispatcher_state.h"

namespace dispatch::state {

// The flat bytes of any message: an Update the reactor built, a snapshot.
std::string EncodeMessage(capnp::MessageBuilder& message);

// Decodes one Update from `bytes` and applies it to `state`. DataLoss when the
// bytes are not a well-formed message; otherwise the result of Apply.
Status ApplyEncodedUpdate(DispatcherState& state, std::string_view bytes);

// The same, but only checks (nothing changes).
Status CheckEncodedUpdate(const DispatcherState& state, std::string_view bytes);

// The whole state as one flat StateSnapshot message, and back.
std::string EncodeSnapshot(const DispatcherState& state);
Result<DispatcherState> DecodeSnapshot(std::string_view bytes);

}  // namespace dispatch::state
