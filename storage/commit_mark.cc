#include "storage/commit_mark.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/checksum.h"
#include "storage/file_io.h"

namespace dispatch::storage {
namespace {

constexpr uint32_t kMagic = 0x43505344;  // "DSPC" little-endian
constexpr uint32_t kVersion = 1;
constexpr size_t kSlotBytes = 32;
constexpr off_t kSlotOffset[2] = {0, 512};
constexpr size_t kFileBytes = 512 + kSlotBytes;

void Put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void Put64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t Get32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t Get64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// magic 4 | version 4 | seq 8 | boot 8 | flags 4 | crc 4 (of the 28 before).
void EncodeSlot(const CommitMarkValue& value, unsigned char* out) {
  Put32(out, kMagic);
  Put32(out + 4, kVersion);
  Put64(out + 8, value.seq);
  Put64(out + 16, value.boot_id);
  Put32(out + 24, value.synced ? 1u : 0u);
  Put32(out + 28, Crc32c(out, 28));
}

std::optional<CommitMarkValue> DecodeSlot(const unsigned char* in) {
  if (Get32(in) != kMagic || Get32(in + 4) != kVersion || Get32(in + 28) != Crc32c(in, 28)) {
    return std::nullopt;
  }
  CommitMarkValue value;
  value.seq = Get64(in + 8);
  value.boot_id = Get64(in + 16);
  value.synced = (Get32(in + 24) & 1u) != 0;
  return value;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// The valid slots of a file's bytes (index 0 or 1; nullopt where invalid).
struct Slots {
  std::optional<CommitMarkValue> slot[2];
  // The newest valid one's index, -1 when none is valid.
  int newest() const {
    if (!slot[0] && !slot[1]) return -1;
    if (!slot[1]) return 0;
    if (!slot[0]) return 1;
    return slot[1]->seq > slot[0]->seq ||
                   (slot[1]->seq == slot[0]->seq && slot[1]->synced && !slot[0]->synced)
               ? 1
               : 0;
  }
};

Result<std::optional<Slots>> ReadSlots(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<Slots>();
    return UnavailableError(Errno("cannot open " + path));
  }
  unsigned char bytes[kFileBytes];
  std::memset(bytes, 0, sizeof(bytes));
  const ssize_t n = pread(fd, bytes, sizeof(bytes), 0);
  const int err = errno;
  close(fd);
  if (n < 0) return UnavailableError("cannot read " + path + ": " + std::strerror(err));
  Slots slots;
  for (int i = 0; i < 2; ++i) slots.slot[i] = DecodeSlot(bytes + kSlotOffset[i]);
  return std::optional<Slots>(slots);
}

}  // namespace

uint64_t CurrentBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string text;
  if (!(in >> text) || text.empty()) return 0;
  const uint64_t id = (static_cast<uint64_t>(Crc32c(text)) << 32) |
                      Crc32c(std::string_view(text).substr(text.size() / 2));
  return id == 0 ? 1 : id;
}

Result<std::optional<CommitMarkValue>> CommitMark::Read(const std::string& work_dir) {
  const std::string path = work_dir + "/" + kCommitMarkFileName;
  auto slots = ReadSlots(path);
  if (!slots.ok()) return slots.status();
  if (!slots->has_value()) return std::optional<CommitMarkValue>();
  const int newest = (*slots)->newest();
  if (newest < 0) {
    return DataLossError("the journal's high-water mark " + path +
                         " is damaged (neither of its two slots is valid)");
  }
  return std::optional<CommitMarkValue>((*slots)->slot[newest]);
}

Result<std::unique_ptr<CommitMark>> CommitMark::Open(const std::string& work_dir,
                                                     const CommitMarkValue& initial, bool reset) {
  const std::string path = work_dir + "/" + kCommitMarkFileName;
  auto slots = ReadSlots(path);
  if (!slots.ok()) return slots.status();
  if (reset || !slots->has_value() || (*slots)->newest() < 0) {
    const std::string tmp = path + ".tmp";
    unsigned char bytes[kFileBytes];
    std::memset(bytes, 0, sizeof(bytes));
    for (off_t offset : kSlotOffset) EncodeSlot(initial, bytes + offset);
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return UnavailableError(Errno("cannot create " + tmp));
    const bool ok = write(fd, bytes, sizeof(bytes)) == static_cast<ssize_t>(sizeof(bytes)) &&
                    fsync(fd) == 0;
    const int err = errno;
    close(fd);
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
      const std::string message = "cannot write " + path + ": " + std::strerror(ok ? errno : err);
      unlink(tmp.c_str());
      return UnavailableError(message);
    }
    DISPATCH_RETURN_IF_ERROR(FsyncDir(work_dir));
    Slots fresh;
    fresh.slot[0] = initial;
    fresh.slot[1] = initial;
    *slots = fresh;
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return UnavailableError(Errno("cannot open " + path));
  const int newest = (*slots)->newest();
  return std::unique_ptr<CommitMark>(
      new CommitMark(path, fd, *(*slots)->slot[newest], /*next_slot=*/1 - newest));
}

CommitMark::~CommitMark() { close(fd_); }

bool CommitMark::Write(uint64_t seq, bool synced) {
  if (seq < last_.seq || (seq == last_.seq && (last_.synced || !synced))) return true;
  CommitMarkValue value{seq, synced, boot_id_};
  unsigned char slot[kSlotBytes];
  EncodeSlot(value, slot);
  if (pwrite(fd_, slot, sizeof(slot), kSlotOffset[next_slot_]) != static_cast<ssize_t>(sizeof(slot))) {
    return false;
  }
  last_ = value;
  next_slot_ = 1 - next_slot_;
  return true;
}

}  // namespace dispatch::storage
