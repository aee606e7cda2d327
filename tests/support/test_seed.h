// The seed of a randomised test: DISPATCH_TEST_SEED when set (to reproduce a
// failure), else a fresh random one. Printed either way, so every failing run
// can be replayed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace dispatch::testing {

inline uint64_t TestSeed() {
  const char* env = std::getenv("DISPATCH_TEST_SEED");
  uint64_t seed = env != nullptr ? std::strtoull(env, nullptr, 10) : std::random_device()();
  std::printf("DISPATCH_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

}  // namespace dispatch::testing
