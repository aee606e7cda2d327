#include "storage/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dispatch::storage {
namespace {

constexpr size_t kChunk = 4u << 20;

}  // namespace

std::string ErrnoText(int err) { return std::strerror(err); }

Status WriteAll(int fd, const void* data, size_t size, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  uint64_t previous_chunk = UINT64_MAX;
  while (size > 0) {
    const uint64_t chunk_start = offset;
    size_t chunk = std::min(size, kChunk);
    while (chunk > 0) {
      const ssize_t n = write(fd, p, chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return UnavailableError("cannot write " + path + ": " + ErrnoText(n < 0 ? errno : EIO));
      }
      p += n;
      chunk -= static_cast<size_t>(n);
      size -= static_cast<size_t>(n);
      offset += static_cast<uint64_t>(n);
    }
    // Best effort: the caller's final fsync is what makes the file durable.
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

Status ReadAll(int fd, void* out, size_t size, uint64_t offset, const std::string& what) {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = pread(fd, p, std::min(size, kChunk), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return UnavailableError("cannot read " + what + ": " + ErrnoText(errno));
    if (n == 0) return DataLossError(what + " ends early: it is damaged");
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

namespace {

Status FsyncPath(const std::string& path, int open_flags) {
  const int fd = open(path.c_str(), open_flags | O_CLOEXEC);
  if (fd < 0) return UnavailableError("cannot open " + path + ": " + ErrnoText(errno));
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return UnavailableError("fsync of " + path + " failed: " + ErrnoText(err));
  return Status::Ok();
}

}  // namespace

Status FsyncDir(const std::string& dir) { return FsyncPath(dir, O_RDONLY | O_DIRECTORY); }

Status FsyncFile(const std::string& path) { return FsyncPath(path, O_RDWR); }

Status WriteInitializedMarker(const std::string& work_dir) {
  const std::string path = work_dir + "/" + kInitializedMarkerName;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return UnavailableError("cannot create " + path + ": " + ErrnoText(errno));
  static constexpr char kText[] = "dispatch.db\n";
  const bool ok = write(fd, kText, sizeof(kText) - 1) == sizeof(kText) - 1 && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!ok) return UnavailableError("cannot write " + path + ": " + ErrnoText(err));
  // The directory entries of dispatch.db and the marker must be durable too.
  return FsyncDir(work_dir);
}

}  // namespace dispatch::storage
