// What the dispatcher keeps of a closure's outcome, shared by the dispatcher
// (which enforces it) and the worker (which applies it before sending, so a
// report is never refused for its size): error texts are cut at 64 KiB, and a
// result over the dispatcher's --max-result-bytes becomes one fixed error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dispatch {

inline constexpr size_t kMaxClosureErrorTextBytes = 64 << 10;

// ClosureSpec.inputs entries at or above this name the closure at index
// (entry - kInputInCall) of the same schedule call (closure ids stay below).
inline constexpr uint64_t kInputInCall = uint64_t{1} << 63;

// A worker's error text as kept: at most 64 KiB, the rest cut with a note.
std::string BoundedErrorText(std::string_view text);

// The error of a closure whose result of `size` bytes is over `limit`.
std::string ResultOverLimitError(uint64_t closure_id, uint64_t size, uint64_t limit);

}  // namespace dispatch
