// Plain-file helpers shared by the files the Store keeps beside its database
// (snapshot files, result files, the commit mark): little-endian fields,
// whole writes with bounded dirty pages, whole reads, and the directory fsync
// that makes a created or renamed file durable. No SQLite, no libuv, no
// logger: callable from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace dispatch::storage {

inline void PutU64(unsigned char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void PutU32(unsigned char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline uint64_t GetU64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}
inline uint32_t GetU32(const unsigned char* in) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

// Writes `size` bytes at `offset` (the file's current position must be
// there), keeping at most two chunks of them dirty in the page cache: each
// chunk's write-back starts once it is written and the one before it is
// waited for, so hundreds of MB written at once do not make the kernel
// throttle every writer of the machine (the journal's commits included).
// Unavailable naming `path` on an error.
Status WriteAll(int fd, const void* data, size_t size, uint64_t offset, const std::string& path);

// Reads exactly `size` bytes at `offset`. Unavailable naming `what` on an
// I/O error; DataLoss ("... ends early: it is damaged") when the file is shorter.
Status ReadAll(int fd, void* out, size_t size, uint64_t offset, const std::string& what);

// fsync of a directory: a file created, renamed or removed in it is durable
// only after this. Unavailable naming the directory.
Status FsyncDir(const std::string& dir);
// fsync of the file at `path`, a file this process wrote and closed.
// Unavailable naming the file.
Status FsyncFile(const std::string& path);

// Written into a work dir once it holds a dispatch database (Store::Open);
// backup_dir.h writes it into a backup first.
inline constexpr char kInitializedMarkerName[] = "INITIALIZED";
// Writes WORK_DIR/INITIALIZED and syncs it and WORK_DIR. Unavailable naming
// the file.
Status WriteInitializedMarker(const std::string& work_dir);

// strerror(err) as a string.
std::string ErrnoText(int err);

}  // namespace dispatch::storage
