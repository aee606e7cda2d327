// CommitMark: the work dir's file COMMITTED, the journal's high-water mark.
// It says the last journal record that was committed (and, when `synced`,
// fsynced) before the mark was written, so start-up can tell a journal that
// ends where it should from one whose tail was lost or deleted (see the top
// of store.h for why this needs no fsync of its own). Layout: two 32-byte
// slots at offsets 0 and 512, each magic "DSPC", version, seq, boot id,
// flags, CRC32C; writes alternate between them, so a torn write leaves the
// other one valid. The file is created whole (temp file, fsync, rename,
// fsync of the directory) and afterwards only overwritten in place.
// No SQLite, no lock, no logger: the Store and the offline verifier use it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace dispatch::storage {

inline constexpr const char* kCommitMarkFileName = "COMMITTED";

struct CommitMarkValue {
  uint64_t seq = 0;  // every record up to seq was committed before the mark
  // true: those records were fsynced before the mark was written (FULL, or
  // the deferred fsync came back); false: only committed to the OS page cache
  // (synchronous=NORMAL), which a machine restart may lose.
  bool synced = false;
  uint64_t boot_id = 0;  // CurrentBootId() of the writer; 0: unknown
};

// A 64-bit digest of /proc/sys/kernel/random/boot_id (new at every boot of
// the machine); 0 when it cannot be read.
uint64_t CurrentBootId();

class CommitMark {
 public:
  // The newest valid slot of WORK_DIR/COMMITTED; nullopt when the file does
  // not exist. A file with no valid slot is DataLoss naming it.
  static Result<std::optional<CommitMarkValue>> Read(const std::string& work_dir);

  // Opens WORK_DIR/COMMITTED for writing; when it is missing, or `reset`,
  // first writes it whole with `initial` in both slots (durably: temp file,
  // fsync, rename, fsync of the directory). Unavailable naming the file on
  // an I/O error.
  static Result<std::unique_ptr<CommitMark>> Open(const std::string& work_dir,
                                                  const CommitMarkValue& initial, bool reset);

  CommitMark(const CommitMark&) = delete;
  CommitMark& operator=(const CommitMark&) = delete;
  ~CommitMark();

  // Overwrites the older slot with (seq, synced, this boot), no fsync: a
  // write into the page cache, which a kill -9 cannot undo. A value not above
  // the last one written (same seq, same or stronger synced) is skipped. A
  // failed write returns false and changes nothing else: an older mark only
  // makes the start-up check weaker, never wrong.
  bool Write(uint64_t seq, bool synced);

  const CommitMarkValue& last() const { return last_; }
  const std::string& path() const { return path_; }

 private:
  CommitMark(std::string path, int fd, CommitMarkValue last, int next_slot)
      : path_(std::move(path)), fd_(fd), last_(last), next_slot_(next_slot) {}

  std::string path_;
  int fd_;
  CommitMarkValue last_;
  int next_slot_;
  uint64_t boot_id_ = CurrentBootId();
};

}  // namespace dispatch::storage
