// Journal records and snapshots as flat Cap'n Proto bytes: the form storage/
// keeps them in (opaque to it) and the reactor hands over. Decoding checks the
// whole message (bounds, nesting, no trailing bytes, and for an Update every
// field read as its schema's type) before Check or Apply reads a field, so a
// damaged record is refused with DataLoss and changes nothing; it never throws.
#pragma once

#include <capnp/message.h>

#include <string>
#include <string_view>

#include "common/status.h"
#include "state/dispatcher_state.h"

namespace dispatch::state {

// The flat bytes of any message: an Update the reactor built, a snapshot.
std::string EncodeMessage(capnp::MessageBuilder& message);

// Decodes one Update from `bytes` and applies it to `state` (filling
// `effects` when given, as Apply does). DataLoss when the bytes are not a
// well-formed message; otherwise the result of Apply.
Status ApplyEncodedUpdate(DispatcherState& state, std::string_view bytes,
                          Effects* effects = nullptr);

// The same, but only checks (nothing changes).
Status CheckEncodedUpdate(const DispatcherState& state, std::string_view bytes);

// The whole state as one flat StateSnapshot message, and back.
std::string EncodeSnapshot(const DispatcherState& state);
Result<DispatcherState> DecodeSnapshot(std::string_view bytes);

// Encodes snapshots again and again into memory it keeps, for the one thread
// that snapshots in the background: after the first, an encoding of a similar
// size maps no fresh memory. Fresh memory costs a page fault per page, and a
// thread that maps and unmaps hundreds of MB holds up every other thread of
// the process (the loop's own faults wait on the same address-space lock).
// The price: about twice the snapshot's size stays resident. Not thread-safe.
class SnapshotEncoder {
 public:
  // The snapshot of `state` as flat bytes (the same bytes EncodeSnapshot
  // returns), valid until the next Encode.
  std::string_view Encode(const DispatcherState& state);

 private:
  // The message's first segment; zero except during Encode (Cap'n Proto
  // zeroes what it used when the message goes).
  kj::Array<capnp::word> scratch_;
  std::string out_;
};

}  // namespace dispatch::state
