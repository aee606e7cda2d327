// The wire protocol's version (PROTOCOL.md, "Versions and compatibility"):
// what this build speaks, the oldest peer a dispatcher of this build still
// serves, and the check the Gateway applies to the version a peer sends.
// A peer that sends none (0: built before Gateway.authenticate carried it)
// speaks protocol 1. Newer peers are served: a peer reads Version.protocol
// and decides itself whether it can talk to an older dispatcher.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace dispatch {

// Bumped on every incompatible wire change (schema/dispatcher.capnp Version).
inline constexpr uint32_t kProtocolVersion = 1;
// The oldest protocol a peer may speak to a dispatcher of this build. Raised
// only with kProtocolVersion, when a release drops what older peers need.
inline constexpr uint32_t kOldestPeerProtocol = 1;

// The protocol a peer speaks when it sent `sent` (0: sent none).
uint32_t PeerProtocol(uint32_t sent);

// FailedPrecondition naming both versions when a peer that sent `sent` is
// older than `oldest` (the peer must be upgraded); OK otherwise.
Status CheckPeerProtocol(uint32_t sent, uint32_t oldest);

}  // namespace dispatch
