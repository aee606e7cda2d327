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
#include "storage/file_io.h"
#include "storage/format.h"

namespace dispatch::storage {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'P', 'S', 'N', 'A', 'P', '1'};
constexpr char kPrefix[] = "snapshot-";
constexpr char kSuffix[] = ".snap";
constexpr char kTempSuffix[] = ".snap.tmp";

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
  if (fd < 0) return UnavailableError("cannot create " + temp + ": " + ErrnoText(errno));
  Status status = WriteAll(fd, header, sizeof(header), 0, temp);
  if (status.ok()) status = WriteAll(fd, body.data(), body.size(), sizeof(header), temp);
  if (status.ok() && fsync(fd) != 0) {
    status = UnavailableError("fsync of " + temp + " failed: " + ErrnoText(errno));
  }
  if (close(fd) != 0 && status.ok()) {
    status = UnavailableError("closing " + temp + " failed: " + ErrnoText(errno));
  }
  if (status.ok() && rename(temp.c_str(), final_path.c_str()) != 0) {
    status = UnavailableError("cannot rename " + temp + " to " + final_path + ": " + ErrnoText(errno));
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
    return UnavailableError("cannot open " + what + ": " + ErrnoText(err));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return UnavailableError("cannot stat " + what + ": " + ErrnoText(err));
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
  status = ReadAll(fd, header, sizeof(header), 0, what);
  if (status.ok()) status = ReadAll(fd, body.data(), body.size(), sizeof(header), what);
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
