// Backoff: jittered exponential delays between reconnect attempts. Attempt n
// waits a uniformly random time in [d/2, d] with d = min(max, initial * 2^n),
// so a fleet of workers that lost the same dispatcher does not come back in
// lock step. Deterministic for a given seed (tests print theirs).
#pragma once

#include <cstdint>
#include <random>

namespace dispatch::clients {

class Backoff {
 public:
  // REQUIRES: 0 < initial_ms <= max_ms.
  Backoff(uint64_t initial_ms, uint64_t max_ms, uint64_t seed);

  // The delay before the next attempt; each call counts one more failure.
  uint64_t NextDelayMs();
  // A success: the next failure starts again from `initial_ms`.
  void Reset() { attempt_ = 0; }
  uint32_t attempt() const { return attempt_; }

 private:
  uint64_t initial_ms_;
  uint64_t max_ms_;
  uint32_t attempt_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace dispatch::clients
