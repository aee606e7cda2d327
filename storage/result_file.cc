#include "storage/result_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/checksum.h"
#include "storage/file_io.h"

namespace dispatch::storage {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'P', 'R', 'E', 'S', 'L', '1'};
constexpr char kSuffix[] = ".result";

struct Header {
  uint64_t closure_id = 0;
  uint32_t attempt = 0;
  uint64_t size = 0;
  uint32_t crc = 0;
};

void EncodeHeader(const Header& h, unsigned char* out) {
  std::memcpy(out, kMagic, sizeof(kMagic));
  PutU64(out + 8, h.closure_id);
  PutU32(out + 16, h.attempt);
  PutU64(out + 20, h.size);
  PutU32(out + 28, h.crc);
  PutU32(out + 32, Crc32c(out, 32));
  PutU32(out + 36, 0);
}

bool DecodeHeader(const unsigned char* in, Header* h) {
  if (std::memcmp(in, kMagic, sizeof(kMagic)) != 0 || GetU32(in + 32) != Crc32c(in, 32)) return false;
  h->closure_id = GetU64(in + 8);
  h->attempt = GetU32(in + 16);
  h->size = GetU64(in + 20);
  h->crc = GetU32(in + 28);
  return true;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens `path` and checks its header and length; the header on success.
Result<Header> OpenAndCheck(const std::string& path, const std::string& what, std::unique_ptr<Fd>* out) {
  const int raw = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (raw < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFoundError(what + " is missing");
    return UnavailableError("cannot open " + what + ": " + ErrnoText(err));
  }
  auto fd = std::make_unique<Fd>(raw);
  struct stat st;
  if (fstat(fd->get(), &st) != 0) return UnavailableError("cannot stat " + what + ": " + ErrnoText(errno));
  unsigned char bytes[kResultFileHeaderBytes];
  if (static_cast<uint64_t>(st.st_size) < sizeof(bytes)) {
    return DataLossError(what + " is " + std::to_string(st.st_size) +
                         " bytes, shorter than its header: it is damaged");
  }
  DISPATCH_RETURN_IF_ERROR(ReadAll(fd->get(), bytes, sizeof(bytes), 0, what));
  Header header;
  if (!DecodeHeader(bytes, &header)) return DataLossError(what + " has a damaged header");
  if (static_cast<uint64_t>(st.st_size) != sizeof(bytes) + header.size) {
    return DataLossError(what + " is " + std::to_string(st.st_size) + " bytes, but its header says " +
                         std::to_string(sizeof(bytes) + header.size) + ": it is damaged");
  }
  *out = std::move(fd);
  return header;
}

}  // namespace

std::string ResultFileName(uint64_t closure_id, uint32_t attempt) {
  char name[64];
  std::snprintf(name, sizeof(name), "%020" PRIu64 "-%010" PRIu32 "%s", closure_id, attempt, kSuffix);
  return name;
}

bool ParseResultFileName(std::string_view name, ResultFileId* id) {
  // Exactly the shape ResultFileName makes: 20 digits, '-', 10 digits, suffix.
  constexpr size_t kSuffixLen = sizeof(kSuffix) - 1;
  if (name.size() != 20 + 1 + 10 + kSuffixLen || name[20] != '-' ||
      name.substr(31) != std::string_view(kSuffix)) {
    return false;
  }
  uint64_t closure = 0;
  uint64_t attempt = 0;
  for (size_t i = 0; i < 31; ++i) {
    if (i == 20) continue;
    if (name[i] < '0' || name[i] > '9') return false;
    uint64_t& into = i < 20 ? closure : attempt;
    const uint64_t digit = static_cast<uint64_t>(name[i] - '0');
    if (into > (UINT64_MAX - digit) / 10) return false;
    into = into * 10 + digit;
  }
  if (attempt > UINT32_MAX) return false;
  id->closure_id = closure;
  id->attempt = static_cast<uint32_t>(attempt);
  return true;
}

Result<uint32_t> WriteResultFile(const std::string& dir, uint64_t closure_id, uint32_t attempt,
                                 std::string_view body) {
  Header header{closure_id, attempt, body.size(), Crc32c(body.data(), body.size())};
  unsigned char bytes[kResultFileHeaderBytes];
  EncodeHeader(header, bytes);
  const std::string path = dir + "/" + ResultFileName(closure_id, attempt);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return UnavailableError("cannot create " + path + ": " + ErrnoText(errno));
  Status status = WriteAll(fd, bytes, sizeof(bytes), 0, path);
  if (status.ok()) status = WriteAll(fd, body.data(), body.size(), sizeof(bytes), path);
  if (status.ok() && fdatasync(fd) != 0) {
    status = UnavailableError("fdatasync of " + path + " failed: " + ErrnoText(errno));
  }
  if (close(fd) != 0 && status.ok()) {
    status = UnavailableError("closing " + path + " failed: " + ErrnoText(errno));
  }
  // The new name is durable only once the directory is.
  if (status.ok()) status = FsyncDir(dir);
  if (!status.ok()) {
    unlink(path.c_str());
    return status;
  }
  return header.crc;
}

Status ReadResultFile(const std::string& dir, uint64_t closure_id, uint32_t attempt, char* dest,
                      size_t size) {
  const std::string path = dir + "/" + ResultFileName(closure_id, attempt);
  const std::string what = "result file " + path;
  std::unique_ptr<Fd> fd;
  auto header = OpenAndCheck(path, what, &fd);
  if (!header.ok()) return header.status();
  if (header->closure_id != closure_id || header->attempt != attempt || header->size != size) {
    return DataLossError(what + " holds closure " + std::to_string(header->closure_id) +
                         " attempt " + std::to_string(header->attempt) + " of " +
                         std::to_string(header->size) + " bytes, not closure " +
                         std::to_string(closure_id) + " attempt " + std::to_string(attempt) +
                         " of " + std::to_string(size) + " bytes: it is damaged");
  }
  return ReadAll(fd->get(), dest, size, kResultFileHeaderBytes, what);
}

Result<uint64_t> CheckResultFile(const std::string& dir, const ResultFileId& id) {
  const std::string path = dir + "/" + ResultFileName(id.closure_id, id.attempt);
  const std::string what = "result file " + path;
  std::unique_ptr<Fd> fd;
  auto header = OpenAndCheck(path, what, &fd);
  if (!header.ok()) {
    if (header.status().code() == StatusCode::kNotFound) return DataLossError(what + " vanished");
    return header.status();
  }
  if (header->closure_id != id.closure_id || header->attempt != id.attempt) {
    return DataLossError(what + " holds closure " + std::to_string(header->closure_id) +
                         " attempt " + std::to_string(header->attempt) + ", not what its name says");
  }
  // Checked a chunk at a time: a result may be hundreds of MB.
  constexpr size_t kChunk = 4u << 20;
  std::string buffer(std::min<uint64_t>(header->size, kChunk), '\0');
  uint32_t crc = 0;
  for (uint64_t done = 0; done < header->size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(header->size - done, kChunk));
    DISPATCH_RETURN_IF_ERROR(ReadAll(fd->get(), buffer.data(), n, kResultFileHeaderBytes + done, what));
    crc = Crc32cExtend(crc, buffer.data(), n);
    done += n;
  }
  if (crc != header->crc) {
    return DataLossError(what + " fails its checksum (header " + std::to_string(header->crc) +
                         ", computed " + std::to_string(crc) + "): it is damaged");
  }
  return header->size;
}

Status RemoveResultFile(const std::string& dir, const ResultFileId& id) {
  const std::string path = dir + "/" + ResultFileName(id.closure_id, id.attempt);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return UnavailableError("cannot remove " + path + ": " + ErrnoText(errno));
  }
  return Status::Ok();
}

Result<ResultDirListing> ListResultFiles(const std::string& dir) {
  ResultDirListing listing;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return listing;
    return UnavailableError("cannot list " + dir + ": " + ErrnoText(errno));
  }
  while (const dirent* entry = readdir(d)) {
    const std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    ResultFileId id;
    if (ParseResultFileName(name, &id)) {
      listing.files.push_back(id);
    } else {
      listing.others.emplace_back(name);
    }
  }
  closedir(d);
  return listing;
}

}  // namespace dispatch::storage
