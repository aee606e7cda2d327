// Memory policy for processes that move large elements (dispatch-worker,
// dispatchctl read, dispatch-bench read). glibc serves every allocation of
// 128 KiB or more with a fresh mmap and returns it with munmap, so each byte
// of a large element or reply message would cost a page fault on first touch
// (measured: the consumer spent most of its time in the kernel, at ~17% of a
// raw TCP copy for 1 MiB elements). Keeping such blocks in the heap lets them
// be reused. Call once, first thing in main(); it changes the whole process.
#pragma once

#include <malloc.h>

namespace dispatch::clients {

inline void KeepLargeAllocationsInHeap() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);  // blocks up to 256 MiB come from the heap
  mallopt(M_TRIM_THRESHOLD, 512 << 20);  // and up to 512 MiB of free heap is kept
}

}  // namespace dispatch::clients
