#include "clients/backoff.h"

#include <kj/debug.h>

#include <algorithm>

namespace dispatch::clients {

Backoff::Backoff(uint64_t initial_ms, uint64_t max_ms, uint64_t seed)
    : initial_ms_(initial_ms), max_ms_(max_ms), rng_(seed) {
  KJ_REQUIRE(initial_ms > 0 && initial_ms <= max_ms, "bad backoff bounds", initial_ms, max_ms);
}

uint64_t Backoff::NextDelayMs() {
  // 2^20 * initial is past any sane max; stop doubling there (no overflow).
  uint32_t shift = std::min<uint32_t>(attempt_, 20);
  uint64_t ceiling = std::min(max_ms_, initial_ms_ << shift);
  if (attempt_ < UINT32_MAX) ++attempt_;
  uint64_t floor = ceiling / 2;
  std::uniform_int_distribution<uint64_t> jitter(floor, ceiling);
  return jitter(rng_);
}

}  // namespace dispatch::clients
