// SetElementList: writes a reply's elements into its `elements` list. Large
// elements are not copied into the message: each becomes a segment of its
// own that points at the caller's buffer, which must outlive the message's
// write. The rest are copied.
#pragma once

#include <capnp/blob.h>
#include <capnp/list.h>

#include <cstddef>
#include <string>
#include <vector>

namespace dispatch::clients {

// Elements at least this large are referenced, not copied. Each becomes a
// segment (a segment table entry, a piece of the write, a segment reader at
// the consumer), so small ones are copied. A copy costs the worker a zeroed
// segment and a memcpy: with `dispatch-bench read --sizes=10240`, 3 pairs,
// referencing 10 KiB elements cut the workers' CPU per element from
// 3.4-3.7 to 2.3-3.2 us and raised the read rate 5-27% (the bound was 64 KiB).
inline constexpr size_t kExternalElementBytes = 4 << 10;
// Cap'n Proto refuses to read a message of 512 segments or more: past this
// many referenced elements, a reply's elements are copied.
inline constexpr size_t kMaxExternalElements = 256;

// REQUIRES: list.size() == elements.size().
void SetElementList(const std::vector<std::string>& elements, capnp::List<capnp::Data>::Builder list);

}  // namespace dispatch::clients
