// CRC32C (Castagnoli), the checksum on every journal record, snapshot and
// dataset definition. A pure function of the bytes: the SSE4.2 instruction when
// the CPU has it, a slicing-by-8 table otherwise; both give identical values
// (tests pin the standard check value Crc32c("123456789") == 0xE3069283).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dispatch {

// Returns the CRC32C of the bytes that gave `crc` followed by `size` bytes at
// `data`. Crc32cExtend(Crc32c(a), b) == Crc32c(a + b); Crc32cExtend(0, ...)
// starts a new checksum.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }
inline uint32_t Crc32c(std::string_view bytes) { return Crc32c(bytes.data(), bytes.size()); }

// The table-driven implementation alone; tests compare it with the hardware path.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t size);

// True when Crc32cExtend uses the CPU's crc32 instruction (for benchmarks and logs).
bool Crc32cIsHardwareAccelerated();

}  // namespace dispatch
