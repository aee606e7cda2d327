// For helper processes that a test kills: each event goes to stdout with
// write(2) the moment it happens (no stdio buffer a kill could lose), so the
// parent knows exactly what was acknowledged before the kill.
#pragma once

#include <unistd.h>

#include <string>

#include "common/status.h"

namespace dispatch::testing {

// Writes `line` and a newline; exits 4 when the parent is gone.
inline void Report(const std::string& line) {
  const std::string out = line + "\n";
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = write(STDOUT_FILENO, out.data() + done, out.size() - done);
    if (n <= 0) _exit(4);  // the parent is gone
    done += static_cast<size_t>(n);
  }
}

// Reports "E <status>" and exits 3.
[[noreturn]] inline void Die(const Status& status) {
  Report("E " + status.ToString());
  _exit(3);
}

}  // namespace dispatch::testing
