#include "common/protocol_version.h"

#include <string>

namespace dispatch {

uint32_t PeerProtocol(uint32_t sent) { return sent == 0 ? 1 : sent; }

Status CheckPeerProtocol(uint32_t sent, uint32_t oldest) {
  const uint32_t peer = PeerProtocol(sent);
  if (peer >= oldest) return Status::Ok();
  return FailedPreconditionError(
      "this peer speaks protocol version " + std::to_string(peer) +
      (sent == 0 ? " (it sent no version)" : "") + " and this dispatcher (protocol version " +
      std::to_string(kProtocolVersion) + ") serves peers of protocol version " +
      std::to_string(oldest) + " or newer: upgrade the worker or client");
}

}  // namespace dispatch
