// PatternBytes: what dispatch-worker's `bytes N:SEED` closure returns, N bytes
// fixed by SEED, so that tests and benchmarks can check every byte of a large
// result without keeping a copy of what they sent.
#pragma once

#include <cstdint>
#include <string>

namespace dispatch::clients {

inline std::string PatternBytes(uint64_t n, uint64_t seed) {
  std::string out(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t i = 0; i < n; ++i) {
    if (i % 8 == 0) x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<char>(x >> (8 * (i % 8)));
  }
  return out;
}

}  // namespace dispatch::clients
