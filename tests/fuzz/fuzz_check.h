// FUZZ_CHECK: a property a fuzz target asserts about the code under test.
// It holds in every build (the replay driver in the default g++ build too):
// a failure prints the property and aborts, which libFuzzer reports as a
// crash and saves the input, and which fails the ctest replay.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, ...)                                                     \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                          \
      std::fprintf(stderr, "\n");                                                 \
      std::abort();                                                               \
    }                                                                             \
  } while (0)
