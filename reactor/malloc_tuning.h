// How the dispatcher process sets up glibc's allocator before it does
// anything else. Measured with `dispatch-bench closures` and `results` (see
// the .cc).
#pragma once

namespace dispatch::reactor {

// Call first thing in main(), before any thread or descriptor exists. When
// the environment does not set glibc.malloc.tcache_count or
// glibc.malloc.hugetlb, sets the missing ones in GLIBC_TUNABLES (keeping the
// tunables already there) and executes the same
// binary again with the same arguments: glibc reads tunables only as a
// process starts. Same pid, so whoever started the dispatcher sees nothing
// of it. If the re-execution fails the process simply goes on untuned.
// DISPATCH_MALLOC_TUNING=off in the environment skips it.
void TuneMallocOrReexec(char** argv);

// Keeps freed memory in the heap instead of returning it (and its page
// faults) to the kernel at once. Bounded; see the .cc.
void KeepFreedMemory();

}  // namespace dispatch::reactor
