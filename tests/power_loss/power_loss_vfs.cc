#include "tests/power_loss/power_loss_vfs.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>

namespace dispatch::testing {
namespace {

const bool kTrace = std::getenv("DISPATCH_POWER_LOSS_TRACE") != nullptr;

constexpr char kVfsName[] = "dispatch-power-loss";
constexpr int64_t kSectorBytes = 512;

PowerLossVfs* Owner(sqlite3_vfs* vfs) { return static_cast<PowerLossVfs*>(vfs->pAppData); }

std::string ReadWholeFile(const std::string& path, bool* exists) {
  std::ifstream in(path, std::ios::binary);
  *exists = static_cast<bool>(in);
  if (!in) return {};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void ApplyWrite(std::string& content, int64_t offset, const char* data, size_t bytes) {
  const size_t end = static_cast<size_t>(offset) + bytes;
  if (content.size() < end) content.resize(end, '\0');
  std::memcpy(content.data() + offset, data, bytes);
}

}  // namespace

// The object SQLite allocates (szOsFile bytes) for each open file: ours in
// front, the wrapped VFS's right behind it.
struct PowerLossVfs::File {
  sqlite3_file base;  // first: SQLite hands us this pointer
  PowerLossVfs* owner;
  std::string* path;  // null for files we do not track
  sqlite3_file* real() { return reinterpret_cast<sqlite3_file*>(this + 1); }

  static File* Of(sqlite3_file* f) { return reinterpret_cast<File*>(f); }

  static int Close(sqlite3_file* f) {
    File* file = Of(f);
    const int rc = file->real()->pMethods->xClose(file->real());
    delete file->path;
    file->path = nullptr;
    return rc;
  }
  static int Read(sqlite3_file* f, void* data, int bytes, sqlite3_int64 offset) {
    return Of(f)->real()->pMethods->xRead(Of(f)->real(), data, bytes, offset);
  }
  static int Write(sqlite3_file* f, const void* data, int bytes, sqlite3_int64 offset) {
    File* file = Of(f);
    if (file->path != nullptr) {
      const int rc = file->owner->BeginMutation(Op::kWrite);
      if (rc != SQLITE_OK) return rc;
    }
    const int rc = file->real()->pMethods->xWrite(file->real(), data, bytes, offset);
    if (rc == SQLITE_OK && file->path != nullptr) file->owner->RecordWrite(*file->path, offset, data, bytes);
    return rc;
  }
  static int Truncate(sqlite3_file* f, sqlite3_int64 size) {
    File* file = Of(f);
    if (file->path != nullptr) {
      const int rc = file->owner->BeginMutation(Op::kWrite);
      if (rc != SQLITE_OK) return rc == SQLITE_IOERR_WRITE ? SQLITE_IOERR_TRUNCATE : rc;
    }
    const int rc = file->real()->pMethods->xTruncate(file->real(), size);
    if (rc == SQLITE_OK && file->path != nullptr) file->owner->RecordTruncate(*file->path, size);
    return rc;
  }
  static int Sync(sqlite3_file* f, int flags) {
    File* file = Of(f);
    if (file->path == nullptr) return file->real()->pMethods->xSync(file->real(), flags);
    int rc = file->owner->BeginMutation(Op::kSync);
    if (rc == SQLITE_OK && file->owner->Poisoned(*file->path)) rc = SQLITE_IOERR_FSYNC;
    if (rc != SQLITE_OK) {
      if (rc == SQLITE_IOERR_FSYNC) file->owner->Poison(*file->path);
      return rc;
    }
    const uint64_t covered = file->owner->PendingOps(*file->path);
    rc = file->real()->pMethods->xSync(file->real(), flags);
    if (rc != SQLITE_OK) return rc;
    // The power went while the disk synced: the caller never saw it succeed.
    return file->owner->MarkSynced(*file->path, covered) ? SQLITE_OK : SQLITE_IOERR_FSYNC;
  }
  static int FileSize(sqlite3_file* f, sqlite3_int64* size) {
    return Of(f)->real()->pMethods->xFileSize(Of(f)->real(), size);
  }
  static int Lock(sqlite3_file* f, int level) { return Of(f)->real()->pMethods->xLock(Of(f)->real(), level); }
  static int Unlock(sqlite3_file* f, int level) {
    return Of(f)->real()->pMethods->xUnlock(Of(f)->real(), level);
  }
  static int CheckReservedLock(sqlite3_file* f, int* out) {
    return Of(f)->real()->pMethods->xCheckReservedLock(Of(f)->real(), out);
  }
  static int FileControl(sqlite3_file* f, int op, void* arg) {
    return Of(f)->real()->pMethods->xFileControl(Of(f)->real(), op, arg);
  }
  static int SectorSize(sqlite3_file* f) { return Of(f)->real()->pMethods->xSectorSize(Of(f)->real()); }
  static int DeviceCharacteristics(sqlite3_file* f) {
    return Of(f)->real()->pMethods->xDeviceCharacteristics(Of(f)->real());
  }
  static int ShmMap(sqlite3_file* f, int region, int bytes, int extend, void volatile** out) {
    return Of(f)->real()->pMethods->xShmMap(Of(f)->real(), region, bytes, extend, out);
  }
  static int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
    return Of(f)->real()->pMethods->xShmLock(Of(f)->real(), offset, n, flags);
  }
  static void ShmBarrier(sqlite3_file* f) { Of(f)->real()->pMethods->xShmBarrier(Of(f)->real()); }
  static int ShmUnmap(sqlite3_file* f, int delete_flag) {
    return Of(f)->real()->pMethods->xShmUnmap(Of(f)->real(), delete_flag);
  }
  // No memory-mapped I/O: every read goes through xRead.
  static int Fetch(sqlite3_file*, sqlite3_int64, int, void** out) {
    *out = nullptr;
    return SQLITE_OK;
  }
  static int Unfetch(sqlite3_file*, sqlite3_int64, void*) { return SQLITE_OK; }
};

namespace {

const sqlite3_io_methods kMethods = {
    3,
    &PowerLossVfs::File::Close,
    &PowerLossVfs::File::Read,
    &PowerLossVfs::File::Write,
    &PowerLossVfs::File::Truncate,
    &PowerLossVfs::File::Sync,
    &PowerLossVfs::File::FileSize,
    &PowerLossVfs::File::Lock,
    &PowerLossVfs::File::Unlock,
    &PowerLossVfs::File::CheckReservedLock,
    &PowerLossVfs::File::FileControl,
    &PowerLossVfs::File::SectorSize,
    &PowerLossVfs::File::DeviceCharacteristics,
    &PowerLossVfs::File::ShmMap,
    &PowerLossVfs::File::ShmLock,
    &PowerLossVfs::File::ShmBarrier,
    &PowerLossVfs::File::ShmUnmap,
    &PowerLossVfs::File::Fetch,
    &PowerLossVfs::File::Unfetch,
};

}  // namespace

PowerLossVfs::PowerLossVfs() : real_(sqlite3_vfs_find(nullptr)) {
  if (real_ == nullptr) throw std::runtime_error("SQLite has no default VFS");
  vfs_ = *real_;
  vfs_.pNext = nullptr;
  vfs_.zName = kVfsName;
  vfs_.pAppData = this;
  vfs_.szOsFile = static_cast<int>(sizeof(File)) + real_->szOsFile;
  vfs_.xOpen = &PowerLossVfs::Open;
  vfs_.xDelete = &PowerLossVfs::Delete;
  if (sqlite3_vfs_register(&vfs_, /*makeDflt=*/1) != SQLITE_OK) {
    throw std::runtime_error("cannot register the power-loss VFS");
  }
}

PowerLossVfs::~PowerLossVfs() {
  sqlite3_vfs_unregister(&vfs_);
  sqlite3_vfs_register(real_, /*makeDflt=*/1);
}

// The wrapped VFS's functions other than open and delete take the wrapped
// VFS itself (the unix VFS reads its own pAppData).
int PowerLossVfs::Open(sqlite3_vfs* vfs, const char* name, sqlite3_file* f, int flags, int* out_flags) {
  PowerLossVfs* owner = Owner(vfs);
  File* file = File::Of(f);
  file->base.pMethods = nullptr;
  file->owner = owner;
  file->path = nullptr;
  const int rc = owner->real_->xOpen(owner->real_, name, file->real(), flags, out_flags);
  if (rc != SQLITE_OK) return rc;
  const bool durable_kind = (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL)) != 0;
  if (durable_kind && name != nullptr) {
    file->path = new std::string(name);
    owner->Track(*file->path);
  }
  file->base.pMethods = &kMethods;
  return SQLITE_OK;
}

int PowerLossVfs::Delete(sqlite3_vfs* vfs, const char* name, int sync_dir) {
  PowerLossVfs* owner = Owner(vfs);
  bool tracked;
  {
    std::lock_guard<std::mutex> lock(owner->mu_);
    tracked = owner->files_.count(name) != 0;
  }
  if (tracked) {
    const int rc = owner->BeginMutation(Op::kWrite);
    if (rc != SQLITE_OK) return SQLITE_IOERR_DELETE;
  }
  const int rc = owner->real_->xDelete(owner->real_, name, sync_dir);
  if (rc == SQLITE_OK && tracked) owner->RecordDelete(name);
  return rc;
}

void PowerLossVfs::CrashAfter(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  crash_at_ = mutations_ + std::max<uint64_t>(n, 1);
}

void PowerLossVfs::CrashNow() {
  std::lock_guard<std::mutex> lock(mu_);
  crashed_ = true;
}

bool PowerLossVfs::crashed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return crashed_;
}

void PowerLossVfs::FailAt(Op op, uint64_t n, int rc) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_op_ = op;
  fail_countdown_ = std::max<uint64_t>(n, 1);
  fail_rc_ = rc;
}

bool PowerLossVfs::failure_injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_injected_;
}

uint64_t PowerLossVfs::mutations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mutations_;
}

int PowerLossVfs::BeginMutation(Op op) {
  std::lock_guard<std::mutex> lock(mu_);
  const int lost = op == Op::kSync ? SQLITE_IOERR_FSYNC : SQLITE_IOERR_WRITE;
  if (crashed_) return lost;
  ++mutations_;
  if (crash_at_ != 0 && mutations_ >= crash_at_) {
    crashed_ = true;
    return lost;
  }
  if (fail_countdown_ != 0 && op == fail_op_ && --fail_countdown_ == 0) {
    failure_injected_ = true;
    return fail_rc_;
  }
  return SQLITE_OK;
}

void PowerLossVfs::Track(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.count(path) != 0) return;
  // A file first seen now is taken as durable as it is (the test's start, or
  // what a previous LosePower left).
  Tracked& t = files_[path];
  t.synced = ReadWholeFile(path, &t.exists);
  if (kTrace) std::fprintf(stderr, "VFS track %s size %zu\n", path.c_str(), t.synced.size());
}

void PowerLossVfs::RecordWrite(const std::string& path, int64_t offset, const void* data, int bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  PendingOp op;
  op.offset = offset;
  op.data.assign(static_cast<const char*>(data), static_cast<size_t>(bytes));
  if (kTrace) std::fprintf(stderr, "VFS write %s off %lld len %d op#%zu\n", path.c_str() + path.rfind('/'), (long long)offset, bytes, files_[path].ops.size());
  files_[path].ops.push_back(std::move(op));
}

void PowerLossVfs::RecordTruncate(const std::string& path, int64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  PendingOp op;
  op.truncate = true;
  op.offset = size;
  files_[path].ops.push_back(std::move(op));
}

void PowerLossVfs::RecordDelete(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (kTrace) std::fprintf(stderr, "VFS delete %s\n", path.c_str());
  // Taken as durable at once (directory entries are not modelled).
  files_[path] = Tracked{};
}

bool PowerLossVfs::Poisoned(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return poisoned_.count(path) != 0;
}

void PowerLossVfs::Poison(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  poisoned_.insert(path);
}

void PowerLossVfs::ApplyOp(std::string& content, const PendingOp& op) {
  if (op.truncate) {
    content.resize(static_cast<size_t>(op.offset), '\0');
  } else {
    ApplyWrite(content, op.offset, op.data.data(), op.data.size());
  }
}

uint64_t PowerLossVfs::PendingOps(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  const Tracked& t = files_[path];
  return t.folded + t.ops.size();
}

bool PowerLossVfs::MarkSynced(const std::string& path, uint64_t mark) {
  std::lock_guard<std::mutex> lock(mu_);
  if (crashed_) return false;
  Tracked& t = files_[path];
  const size_t ops =
      mark > t.folded ? static_cast<size_t>(std::min<uint64_t>(mark - t.folded, t.ops.size())) : 0;
  if (kTrace) {
    std::fprintf(stderr, "VFS synced %s %zu of %zu ops\n", path.c_str() + path.rfind('/'), ops,
                 t.ops.size());
  }
  for (size_t i = 0; i < ops; ++i) ApplyOp(t.synced, t.ops[i]);
  if (ops > 0) t.exists = true;
  t.ops.erase(t.ops.begin(), t.ops.begin() + static_cast<std::ptrdiff_t>(ops));
  t.folded += ops;
  return true;
}

std::string PowerLossVfs::LosePower(LossMode mode, std::mt19937_64& rng) {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream report;
  for (auto& [path, t] : files_) {
    std::string content = t.synced;
    bool exists = t.exists;
    const size_t n = t.ops.size();
    size_t keep = 0;
    if (mode != LossMode::kDropUnsynced && n > 0) keep = static_cast<size_t>(rng() % (n + 1));
    for (size_t i = 0; i < keep; ++i) ApplyOp(content, t.ops[i]);
    if (keep > 0) exists = true;
    std::string torn;
    if (mode == LossMode::kTornWrite && keep < n && !t.ops[keep].truncate) {
      // The next write reached the platter in part: some whole sectors,
      // then one sector of garbage.
      const PendingOp& op = t.ops[keep];
      const int64_t sectors = (static_cast<int64_t>(op.data.size()) + kSectorBytes - 1) / kSectorBytes;
      const int64_t whole = static_cast<int64_t>(rng() % static_cast<uint64_t>(sectors));
      const size_t good = std::min(op.data.size(), static_cast<size_t>(whole * kSectorBytes));
      ApplyWrite(content, op.offset, op.data.data(), good);
      const size_t garbage = std::min<size_t>(op.data.size() - good, kSectorBytes);
      std::string noise(garbage, '\0');
      for (char& c : noise) c = static_cast<char>(rng());
      ApplyWrite(content, op.offset + static_cast<int64_t>(good), noise.data(), noise.size());
      exists = true;
      torn = ", write " + std::to_string(keep) + " torn after " + std::to_string(good) + " bytes";
    }
    report << path << ": kept " << keep << " of " << n << " unsynced ops" << torn << "; ";
    if (exists) {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(content.data(), static_cast<std::streamsize>(content.size()));
      if (!out) throw std::runtime_error("cannot rewrite " + path);
    } else {
      unlink(path.c_str());
    }
    const bool is_wal = path.size() > 4 && path.compare(path.size() - 4, 4, "-wal") == 0;
    if (!is_wal) unlink((path + "-shm").c_str());
  }
  files_.clear();
  poisoned_.clear();
  crash_at_ = 0;
  crashed_ = false;
  fail_countdown_ = 0;
  failure_injected_ = false;
  return report.str();
}

}  // namespace dispatch::testing
