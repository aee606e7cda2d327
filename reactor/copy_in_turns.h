// CopyInTurns: copies bytes into a message being built (a reply, a push) a
// slice of loop time per KJ turn, so that megabytes of copying never hold
// the loop. The UvEventPort ends a slice after 0.5 ms, so libuv serves its
// sockets between turns. Measured with `dispatch-bench results
// --bytes=33554432`: a 32 MiB result copied at once held the loop for
// 12-36 ms, mostly faulting in the message's fresh pages; 512 KiB per turn
// still took up to 6 ms on a VM whose page faults are slow.
// REQUIRES: loop thread; the sources and destinations live until the
// promise resolves.
#pragma once

#include <kj/async.h>

#include <cstddef>
#include <vector>

namespace dispatch::reactor {

// Bytes still to copy.
struct PendingCopy {
  char* dest;
  const char* src;
  size_t size;
};

// Copies every one, in order, for at most 0.3 ms per turn.
kj::Promise<void> CopyInTurns(std::vector<PendingCopy> copies);

}  // namespace dispatch::reactor
