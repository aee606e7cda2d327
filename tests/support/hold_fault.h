// HoldFault: keeps a fault in place for a span of time (a process stopped
// with SIGSTOP, a peer that stays silent). The span is the fault itself, the
// scenario's input, not a wait for something to happen: waiting for an
// effect is WaitUntil's job (tests/support/wait_until.h).
#pragma once

#include <chrono>
#include <thread>

namespace dispatch::testing {

inline void HoldFault(std::chrono::milliseconds span) { std::this_thread::sleep_for(span); }

}  // namespace dispatch::testing
