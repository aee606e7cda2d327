#include "storage/snapshot_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/checksum.h"
#include "storage/format.h"

namespace dispatch::storage {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'P', 'S', 'N', 'A', 'P', '1'};
constexpr char kPrefix[] = "snapshot-";
constexpr char kSuffix[] = ".snap";
constexpr char kTempSuffix[] = ".snap.tmp";
// Written (and then flushed) in chunks of this size; see WriteAll.
constexpr size_t kWriteChunk = 4u << 20;

void PutU64(unsigned char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
void PutU32(unsigned char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint64_t GetU64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}
uint32_t GetU32(const unsigned char* in) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

std::string Errno(int err) { return std::strerror(err); }

// Writes everything, and keeps at most two chunks of it dirty in the page
// cache: each chunk's write-back starts once it is written, and the one
// before it is waited for. A snapshot of hundreds of MB written at once would
// make the kernel throttle every writer of the machine (the dispatcher's own
// journal commits included) while it flushes them.
Status WriteAll(int fd, const void* data, size_t size, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  uint64_t previous_chunk = UINT64_MAX;
  while (size > 0) {
    const uint64_t chunk_start = offset;
    size_t chunk = std::min(size, kWriteChunk);
    while (chunk > 0) {
      const ssize_t n = write(fd, p, chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return UnavailableError("cannot write " + path + ": " + Errno(n < 0 ? errno : EIO));
      p += n;
      chunk -= static_cast<size_t>(n);
      size -= static_cast<size_t>(n);
      offset += static_cast<uint64_t>(n);
    }
    // Best effort: the final fsync is what makes the file durable.
    sync_file_range(fd, static_cast<off_t>(chunk_start), static_cast<off_t>(offset - chunk_start),
                    SYNC_FILE_RANGE_WRITE);
    if (previous_chunk != UINT64_MAX) {
      sync_file_range(fd, static_cast<off_t>(previous_chunk),
                      static_cast<off_t>(chunk_start - previous_chunk),
                      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    }
    previous_chunk = chunk_start;
  }
  return Status::Ok();
}

Status FsyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return UnavailableError("cannot open " + dir + ": " + Errno(errno));
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return UnavailableError("fsync of " + dir + " failed: " + Errno(err));
  return Status::Ok();
}

}  // namespace

std::string SnapshotFileName(uint64_t seq, uint32_t crc) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%020" PRIu64 "-%08" PRIx32 "%s", kPrefix, seq, crc, kSuffix);
  return name;
}

std::string SnapshotTempFileName(uint64_t seq) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%020" PRIu64 "%s", kPrefix, seq, kTempSuffix);
  return name;
}

bool IsSnapshotFileName(std::string_view name) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  return name.rfind(kPrefix, 0) == 0 && (ends_with(kSuffix) || ends_with(kTempSuffix));
}

Result<SnapshotFileInfo> WriteSnapshotFile(const std::string& work_dir, uint64_t seq,
                                           std::string_view body) {
  SnapshotFileInfo info;
  info.seq = seq;
  info.size = body.size();
  info.crc = SnapshotChecksum(seq, body);
  info.name = SnapshotFileName(seq, info.crc);

  unsigned char header[kSnapshotFileHeaderBytes];
  std::memcpy(header, kMagic, sizeof(kMagic));
  PutU64(header + 8, seq);
  PutU64(header + 16, info.size);
  PutU32(header + 24, info.crc);
  PutU32(header + 28, Crc32c(header, 28));

  const std::string temp = work_dir + "/" + SnapshotTempFileName(seq);
  const std::string final_path = work_dir + "/" + info.name;
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return UnavailableError("cannot create " + temp + ": " + Errno(errno));
  Status status = WriteAll(fd, header, sizeof(header), 0, temp);
  if (status.ok()) status = WriteAll(fd, body.data(), body.size(), sizeof(header), temp);
  if (status.ok() && fsync(fd) != 0) {
    status = UnavailableError("fsync of " + temp + " failed: " + Errno(errno));
  }
  if (close(fd) != 0 && status.ok()) {
    status = UnavailableError("closing " + temp + " failed: " + Errno(errno));
  }
  if (status.ok() && rename(temp.c_str(), final_path.c_str()) != 0) {
    status = UnavailableError("cannot rename " + temp + " to " + final_path + ": " + Errno(errno));
  }
  if (!status.ok()) {
    unlink(temp.c_str());
    return status;
  }
  // The rename is durable only once the directory is.
  DISPATCH_RETURN_IF_ERROR(FsyncDir(work_dir));
  return info;
}

Result<std::string> ReadSnapshotFile(const std::string& work_dir,
                                     const SnapshotFileInfo& expected) {
  const std::string path = work_dir + "/" + expected.name;
  const std::string what = "snapshot file " + path + " (the snapshot at record " +
                           std::to_string(expected.seq) + ")";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return DataLossError(what + " is missing");
    return UnavailableError("cannot open " + what + ": " + Errno(err));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return UnavailableError("cannot stat " + what + ": " + Errno(err));
  }
  const uint64_t want = kSnapshotFileHeaderBytes + expected.size;
  if (static_cast<uint64_t>(st.st_size) != want) {
    close(fd);
    return DataLossError(what + " is " + std::to_string(st.st_size) + " bytes, expected " +
                         std::to_string(want) + ": it is damaged");
  }
  unsigned char header[kSnapshotFileHeaderBytes];
  std::string body(expected.size, '\0');
  Status status;
  auto read_all = [&](void* out, size_t size, uint64_t offset) {
    auto* p = static_cast<char*>(out);
    while (size > 0) {
      const ssize_t n = pread(fd, p, std::min(size, kWriteChunk), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return UnavailableError("cannot read " + what + ": " + Errno(errno));
      if (n == 0) return DataLossError(what + " ends early: it is damaged");
      p += n;
      size -= static_cast<size_t>(n);
      offset += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  };
  status = read_all(header, sizeof(header), 0);
  if (status.ok()) status = read_all(body.data(), body.size(), sizeof(header));
  close(fd);
  if (!status.ok()) return status;
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0 || GetU32(header + 28) != Crc32c(header, 28)) {
    return DataLossError(what + " has a damaged header");
  }
  if (GetU64(header + 8) != expected.seq || GetU64(header + 16) != expected.size ||
      GetU32(header + 24) != expected.crc) {
    return DataLossError(what + " does not hold what the database recorded (record " +
                         std::to_string(GetU64(header + 8)) + ", " +
                         std::to_string(GetU64(header + 16)) + " bytes)");
  }
  const uint32_t computed = SnapshotChecksum(expected.seq, body);
  if (computed != expected.crc) {
    return DataLossError(what + " fails its checksum (recorded " + std::to_string(expected.crc) +
                         ", computed " + std::to_string(computed) + "): it is damaged");
  }
  return body;
}

}  // namespace dispatch::storage
