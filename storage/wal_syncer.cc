#include "storage/wal_syncer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dispatch::storage {

Result<std::unique_ptr<WalSyncer>> WalSyncer::Open(const std::string& wal_path) {
  // Read-only: fdatasync needs no write access, and we never write.
  const int fd = open(wal_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return UnavailableError("cannot open " + wal_path + " to sync it: " + std::strerror(errno));
  }
  return std::unique_ptr<WalSyncer>(new WalSyncer(wal_path, fd));
}

WalSyncer::~WalSyncer() { close(fd_); }

Status WalSyncer::Sync() {
  if (fail_next_) {
    fail_next_ = false;
    return UnavailableError("fdatasync of " + path_ + " failed: injected for a test");
  }
  if (fdatasync(fd_) != 0) {
    return UnavailableError("fdatasync of " + path_ + " failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace dispatch::storage
