// Memory policy for processes that move large elements. glibc maps every block
// of 128 KiB or more afresh and unmaps it when freed, so each byte of a large
// element or reply costs a page fault (measured: most of a consumer's time, at
// ~17% of a raw TCP copy for 1 MiB elements). Keeping them in the heap lets them
// be reused. Call first thing in main(): it changes the whole process.
#pragma once

#include <malloc.h>

namespace dispatch::clients {

inline void KeepLargeAllocationsInHeap() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);  // blocks up to 256 MiB come from the heap
  mallopt(M_TRIM_THRESHOLD, 512 << 20);  // and up to 512 MiB of free heap is kept
}

}  // namespace dispatch::clients
