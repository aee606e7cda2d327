#include "storage/wal_syncer.h"

namespace dispatch::storage {

Result<std::unique_ptr<WalSyncer>> WalSyncer::Open(const std::string& wal_path) {
  sqlite3_vfs* vfs = sqlite3_vfs_find(nullptr);
  if (vfs == nullptr) return UnavailableError("cannot sync " + wal_path + ": SQLite has no VFS");
  // Zeroed: a VFS that fails xOpen leaves pMethods null, and then there is
  // nothing to close.
  auto storage = std::make_unique<char[]>(static_cast<size_t>(vfs->szOsFile));
  auto* file = reinterpret_cast<sqlite3_file*>(storage.get());
  // No CREATE: the connection made the file; a missing one is an error.
  int out_flags = 0;
  const int rc = vfs->xOpen(vfs, wal_path.c_str(), file, SQLITE_OPEN_READWRITE | SQLITE_OPEN_WAL,
                            &out_flags);
  if (rc != SQLITE_OK) {
    if (file->pMethods != nullptr) file->pMethods->xClose(file);
    return UnavailableError("cannot open " + wal_path + " to sync it: " + sqlite3_errstr(rc));
  }
  return std::unique_ptr<WalSyncer>(new WalSyncer(wal_path, std::move(storage)));
}

WalSyncer::~WalSyncer() {
  if (file()->pMethods != nullptr) file()->pMethods->xClose(file());
}

Status WalSyncer::Sync() {
  if (fail_next_) {
    fail_next_ = false;
    return UnavailableError("sync of " + path_ + " failed: injected for a test");
  }
  const int rc = file()->pMethods->xSync(file(), SQLITE_SYNC_NORMAL | SQLITE_SYNC_DATAONLY);
  if (rc != SQLITE_OK) {
    return UnavailableError("sync of " + path_ + " failed: " + sqlite3_errstr(rc) + " (" +
                            std::to_string(rc) + ")");
  }
  return Status::Ok();
}

}  // namespace dispatch::storage
