// A backup directory: a work dir made by copying a live one (dispatchctl
// backup). The database is copied by DatabaseBackup (database_backup.h);
// these functions make the rest, in an order that never leaves a directory
// a dispatcher would start on with less than the backup holds:
//  1. PrepareBackupDir (any thread): TARGET must be missing or empty; it is
//     created with results/, and INITIALIZED is written and synced first.
//     From then on a dispatcher started on TARGET refuses (DataLoss: "the
//     journal database is empty or was replaced") until dispatch.db is in
//     place, so an interrupted backup is never taken for an empty work dir.
//  2. The database is copied into TARGET/dispatch.db.partial.
//  3. PinWorkDirFiles (the thread of the copy, in the same turn as its last
//     step, so no file it names can be removed in between): hard-links the
//     snapshot file and every result file into TARGET. A file that cannot be
//     linked (TARGET on another file system) is opened instead: its bytes
//     stay readable even if the dispatcher removes it before they are copied.
//     Those files are never written again once named, so a link shares
//     nothing that changes.
//  4. CompleteBackupDir (any thread): copies the opened files, syncs them
//     and the database copy, renames the copy dispatch.db, writes COMMITTED
//     naming its last record, and syncs the directories.
//  A failure after step 1 leaves the files to RemoveBackupDir.
// No SQLite, no libuv, no logger.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace dispatch::storage {

// Where the database is copied before it is complete and synced.
inline constexpr char kPartialDatabaseName[] = "dispatch.db.partial";

// Step 1. FailedPrecondition naming TARGET when it exists and is not an
// empty directory (nothing is changed); Unavailable on an I/O error.
// `*created`: TARGET did not exist and was made here.
Status PrepareBackupDir(const std::string& target, bool* created);

// Step 3's result: the files a backup holds besides its database, each
// linked already or opened for CompleteBackupDir to copy.
class PinnedFiles {
 public:
  PinnedFiles() = default;
  PinnedFiles(PinnedFiles&& other) noexcept;
  PinnedFiles& operator=(PinnedFiles&& other) noexcept;
  PinnedFiles(const PinnedFiles&) = delete;
  PinnedFiles& operator=(const PinnedFiles&) = delete;
  // Closes the files still open.
  ~PinnedFiles();

  struct File {
    std::string name;  // inside the work dir and TARGET: "snapshot-....snap", "results/..."
    int fd = -1;       // open to be copied; -1: hard-linked already
  };
  const std::vector<File>& files() const { return files_; }
  size_t linked() const { return files_.size() - opened_; }
  size_t opened() const { return opened_; }
  void Add(std::string name, int fd);
  void CloseAll();

 private:
  std::vector<File> files_;
  size_t opened_ = 0;
};

// Step 3. `snapshot_file`: the snapshot file the copied database names
// (empty: none). At most `max_opened` files may need copying:
// ResourceExhausted beyond (a work dir with that many result files is
// backed up to its own file system, where they are linked). Unavailable
// naming the file on an I/O error.
Result<PinnedFiles> PinWorkDirFiles(const std::string& work_dir, const std::string& snapshot_file,
                                    const std::string& target, size_t max_opened);

struct CompletedBackup {
  uint64_t database_bytes = 0;  // of dispatch.db
  uint64_t copied_bytes = 0;    // of the files copied, not linked
};

// Step 4. `last_seq`: the last journal record of the copied database.
// Closes the pinned files. Unavailable naming the file on an I/O error.
Result<CompletedBackup> CompleteBackupDir(const std::string& target, PinnedFiles& pinned,
                                          uint64_t last_seq);

// Removes what the steps made in TARGET (every entry: it was empty before),
// and TARGET itself when `created`. Best effort.
void RemoveBackupDir(const std::string& target, bool created);

}  // namespace dispatch::storage
