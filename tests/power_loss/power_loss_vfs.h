// PowerLossVfs: a test-only SQLite VFS that models a disk with a volatile
// write cache, in the spirit of SQLite's crash simulation (test6.c) and
// leveldb's fault-injection env, written here over SQLite's public VFS API.
//
// It wraps the default VFS and becomes the default itself while it lives, so
// every connection the Store opens (and the WalSyncer's handle) goes through
// it. For the database and its WAL it remembers, per file, the content as of
// the last successful sync and the writes and truncations made since. Those
// reach the real file at once (readers see them, as they would see the page
// cache), but they are not durable: LosePower() rewrites each file as the
// disk could hold it after a power cut:
//   - kDropUnsynced: exactly the synced content;
//   - kKeepPrefix: the synced content plus the first k unsynced operations
//     (k random), as a disk that wrote some of its cache in order;
//   - kTornWrite: as kKeepPrefix, then a random whole-sector prefix of the
//     next write and one sector of garbage after it.
// A sync that has begun but not returned when the power goes is not durable
// (the caller never saw it succeed). What is not modelled: directory entries
// (file creation, rename and unlink are taken as durable at once) and the
// snapshot files, which the Store writes itself and syncs, renames and syncs
// the directory of before the database names them.
//
// CrashAfter(n) picks the moment: the n-th mutation from then on (write,
// truncate or sync) and every one after it fail with an I/O error and change
// nothing, as a disk that lost power does; what the process does after that
// can no longer reach the disk. FailAt() injects a single failure instead
// (EIO on a sync, ENOSPC on a write) and lets later calls through, except
// that a file whose sync failed never syncs again (see Poisoned()).
//
// Thread-safe (the Store syncs and checkpoints on libuv's thread pool). One
// instance at a time.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace dispatch::testing {

class PowerLossVfs {
 public:
  enum class LossMode { kDropUnsynced, kKeepPrefix, kTornWrite };
  enum class Op { kWrite, kSync };

  // Registers itself as SQLite's default VFS.
  PowerLossVfs();
  // Unregisters, making the wrapped VFS the default again.
  ~PowerLossVfs();
  PowerLossVfs(const PowerLossVfs&) = delete;
  PowerLossVfs& operator=(const PowerLossVfs&) = delete;

  // The power goes at the n-th mutation from now (n >= 1).
  void CrashAfter(uint64_t n);
  // The power goes now (if it has not already).
  void CrashNow();
  bool crashed() const;
  // The n-th `op` from now (n >= 1) fails with `rc` (SQLITE_IOERR_FSYNC,
  // SQLITE_FULL, ...) and changes nothing; later ones succeed.
  void FailAt(Op op, uint64_t n, int rc);
  bool failure_injected() const;
  // Mutations seen so far (writes, truncations and syncs of tracked files).
  uint64_t mutations() const;

  // REQUIRES: no handle of a tracked file open. Rewrites every tracked file
  // as the disk holds it after a power cut (see above), removes the shared
  // memory files (a reboot does not keep them) and forgets all tracking, so
  // the next open starts from the files as they are. Returns a line saying
  // what it did per file (for a failing seed's log).
  std::string LosePower(LossMode mode, std::mt19937_64& rng);

  // For the file methods in the .cc only.
  struct File;
  // Returns SQLITE_OK to go ahead, or the error this mutation fails with.
  int BeginMutation(Op op);
  void RecordWrite(const std::string& path, int64_t offset, const void* data, int bytes);
  void RecordTruncate(const std::string& path, int64_t size);
  void RecordDelete(const std::string& path);
  // How many operations were ever recorded for `path`: a sync that starts
  // now covers exactly those.
  uint64_t PendingOps(const std::string& path);
  // Folds the operations numbered below `mark` (PendingOps at the sync's
  // start) that are still pending into the synced content; those recorded
  // after the sync began stay pending even when another sync folded some
  // meanwhile. False (nothing changes) when the power went meanwhile.
  bool MarkSynced(const std::string& path, uint64_t mark);
  void Track(const std::string& path);
  // After a failed sync the kernel may have dropped the file's dirty pages,
  // and reports that only once: every later sync of the file fails too, so
  // nothing can be trusted as durable until LosePower.
  bool Poisoned(const std::string& path);
  void Poison(const std::string& path);
  sqlite3_vfs* real() const { return real_; }

 private:
  struct PendingOp {
    bool truncate = false;
    int64_t offset = 0;  // of a write; the new size of a truncation
    std::string data;
  };
  struct Tracked {
    bool exists = false;  // in the synced content
    std::string synced;
    std::vector<PendingOp> ops;
    uint64_t folded = 0;  // operations folded into `synced` (ops[0] is number `folded`)
  };
  static void ApplyOp(std::string& content, const PendingOp& op);
  static int Open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags);
  static int Delete(sqlite3_vfs* vfs, const char* name, int sync_dir);

  mutable std::mutex mu_;
  sqlite3_vfs vfs_;
  sqlite3_vfs* real_;
  std::map<std::string, Tracked> files_;
  std::set<std::string> poisoned_;
  uint64_t mutations_ = 0;
  uint64_t crash_at_ = 0;  // 0: no crash planned
  bool crashed_ = false;
  Op fail_op_ = Op::kSync;
  uint64_t fail_countdown_ = 0;  // 0: no failure planned
  int fail_rc_ = SQLITE_IOERR;
  bool failure_injected_ = false;
};

}  // namespace dispatch::testing
