#include "reactor/malloc_tuning.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>

#include "reactor/exec_self.h"

namespace dispatch::reactor {
namespace {

// glibc's per-thread cache keeps 7 freed chunks of each size by default.
// A group commit of 1,024 closures frees thousands of tree nodes of a few
// sizes at once; past the 7, every free and the next malloc go through the
// arena's bins (_int_malloc, malloc_consolidate, unlink_chunk): a quarter
// of the dispatcher's CPU per closure. With 4,096 per size,
// `dispatch-bench closures` measured 12.1-13.7 us of dispatcher CPU per
// closure before and 9.7-10.5 after (counts 1,024 to 8,192 tried). The
// cache holds only chunks of up to 1,032 bytes that the process freed, so
// it never raises the peak the process already reached.
constexpr char kTcacheTunable[] = "glibc.malloc.tcache_count";
constexpr char kTcacheSetting[] = "glibc.malloc.tcache_count=4096";

}  // namespace

void TuneMallocOrReexec(char** argv) {
  const char* off = getenv("DISPATCH_MALLOC_TUNING");
  if (off != nullptr && strcmp(off, "off") == 0) return;
  const char* tunables = getenv("GLIBC_TUNABLES");
  std::string value = tunables == nullptr ? "" : tunables;
  // Already set (by us on the first start, or by the operator): keep it.
  if (value.find(kTcacheTunable) != std::string::npos) return;
  value = value.empty() ? kTcacheSetting : value + ":" + kTcacheSetting;
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
