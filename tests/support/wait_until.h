// WaitUntil: the one way a test waits for what nothing tells it about. It
// checks a condition, lets the world move, and checks again, until the
// condition holds or a deadline passes; it never sleeps in place of a check.
// How the world moves between checks is the caller's `between`:
//   Pause       (the default) this thread drives nothing: other threads or
//               processes make the condition true; it pauses a poll interval.
//   ClientLoop  (tests/integration/client_loop.h) turns the test's own KJ
//               loop, whose I/O the condition depends on.
//   LoopPasses  (tests/support/loop_passes.h) runs passes of a libuv loop,
//               each cut short once the condition holds.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

namespace dispatch::testing {

// How long a test waits for anything before it fails.
inline constexpr std::chrono::milliseconds kTestDeadline{30000};
// The longest pause between two checks of a condition.
inline constexpr std::chrono::milliseconds kPollInterval{5};

using WaitCondition = std::function<bool()>;

// What runs between two checks: returns within about `left`, the time to
// the deadline. Gets the condition too, for a loop pass that ends early.
template <typename T>
concept WaitBetween = requires(T& between, const WaitCondition& condition,
                               std::chrono::milliseconds left) {
  between.Turn(condition, left);
};

struct Pause {
  void Turn(const WaitCondition&, std::chrono::milliseconds left) const {
    // A poll interval between checks, not a wait for an event.
    std::this_thread::sleep_for(std::min(left, kPollInterval));
  }
};

// True once `condition()` holds; false if it still does not at the deadline.
template <WaitBetween Between>
bool WaitUntil(const WaitCondition& condition, Between&& between,
               std::chrono::milliseconds deadline = kTestDeadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!condition()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return false;
    between.Turn(condition, std::chrono::ceil<std::chrono::milliseconds>(until - now));
  }
  return true;
}

inline bool WaitUntil(const WaitCondition& condition,
                      std::chrono::milliseconds deadline = kTestDeadline) {
  return WaitUntil(condition, Pause{}, deadline);
}

}  // namespace dispatch::testing
