#include "reactor/copy_in_turns.h"

#include <uv.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

namespace dispatch::reactor {
namespace {

constexpr uint64_t kCopyNanosPerTurn = 300 * 1000;
// The clock is read once per piece.
constexpr size_t kCopyPieceBytes = 64u << 10;

kj::Promise<void> CopyFrom(std::vector<PendingCopy> copies, size_t next) {
  const uint64_t deadline = uv_hrtime() + kCopyNanosPerTurn;
  while (next < copies.size() && uv_hrtime() < deadline) {
    PendingCopy& copy = copies[next];
    const size_t n = std::min(copy.size, kCopyPieceBytes);
    std::memcpy(copy.dest, copy.src, n);
    copy.dest += n;
    copy.src += n;
    copy.size -= n;
    if (copy.size == 0) ++next;
  }
  if (next == copies.size()) return kj::READY_NOW;
  return kj::evalLater([copies = std::move(copies), next]() mutable {
    return CopyFrom(std::move(copies), next);
  });
}

}  // namespace

kj::Promise<void> CopyInTurns(std::vector<PendingCopy> copies) {
  return CopyFrom(std::move(copies), 0);
}

}  // namespace dispatch::reactor
