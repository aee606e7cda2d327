#include "reactor/malloc_tuning.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>

#include "reactor/exec_self.h"

namespace dispatch::reactor {
namespace {

// What the dispatcher sets, each unless the environment already names it.
//
// glibc.malloc.tcache_count: glibc's per-thread cache keeps 7 freed chunks of
// each size by default. A group commit of 1,024 closures frees thousands of
// tree nodes of a few sizes at once; past the 7, every free and the next
// malloc go through the arena's bins (_int_malloc, malloc_consolidate,
// unlink_chunk): a quarter of the dispatcher's CPU per closure. With 4,096
// per size, `dispatch-bench closures` measured 12.1-13.7 us of dispatcher CPU
// per closure before and 9.7-10.5 after (counts 1,024 to 8,192 tried). The
// cache holds only chunks of up to 1,032 bytes that the process freed, so it
// never raises the peak the process already reached.
//
// glibc.malloc.hugetlb=1: glibc asks for transparent huge pages
// (madvise(MADV_HUGEPAGE)) on the memory it maps, so a large block faults in
// 2 MiB at a time instead of 4 KiB. A 32 MiB closure result passes through
// large blocks on the loop thread (the received message, the copy the batch
// holds), and in a VM each 4 KiB fault costs tens of microseconds.
// `dispatch-bench results --closures=16 --bytes=33554432 --restart=false`,
// with GLIBC_TUNABLES=glibc.malloc.hugetlb=0 against this default: while the
// results were stored, pings (the loop's stalls) p50 56-62 ms before and
// 1.2-1.6 ms after, max 411-479 ms and 228-290 ms; storing them took 9.4-10.2
// s and 5.5-6.9 s. `dispatch-bench closures` did not get slower (dispatcher
// CPU per closure 2.3-2.7 us against 2.9-3.8). Where transparent huge pages
// are off it does nothing.
struct Tunable {
  const char* name;
  const char* setting;
};
constexpr Tunable kTunables[] = {
    {"glibc.malloc.tcache_count", "glibc.malloc.tcache_count=4096"},
    {"glibc.malloc.hugetlb", "glibc.malloc.hugetlb=1"},
};

}  // namespace

void TuneMallocOrReexec(char** argv) {
  const char* off = getenv("DISPATCH_MALLOC_TUNING");
  if (off != nullptr && strcmp(off, "off") == 0) return;
  const char* tunables = getenv("GLIBC_TUNABLES");
  std::string value = tunables == nullptr ? "" : tunables;
  bool added = false;
  for (const Tunable& tunable : kTunables) {
    // Already set (by us on the first start, or by the operator): keep it.
    if (value.find(tunable.name) != std::string::npos) continue;
    value = value.empty() ? tunable.setting : value + ":" + tunable.setting;
    added = true;
  }
  if (!added) return;
  if (setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  ExecSelf(argv);
  // Not re-executed (no /proc, say): run as we are, without the variable
  // we could not apply, so children do not inherit a half-made setting.
  if (tunables == nullptr) {
    unsetenv("GLIBC_TUNABLES");
  } else {
    setenv("GLIBC_TUNABLES", tunables, 1);
  }
}

// glibc returns the free top of the heap to the kernel once it passes 128 KiB
// (its trim threshold), so every loop pass that builds and frees a few
// hundred KiB (a schedule call of 1,024 closures: its plan and its journal
// records) paid a brk to grow the heap again and a page fault, with the page
// zeroed, per 4 KiB it touched: 650 brk calls a second and about a tenth of
// the dispatcher's CPU in the closures bench. Free memory up to 64 MiB is
// kept instead (bounded: past that the top is trimmed as before), and blocks
// under 16 MiB come from the heap, not from an mmap each (setting the trim
// threshold turns glibc's own adjustment of the mmap threshold off).
void KeepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace dispatch::reactor
