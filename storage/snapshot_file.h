// Snapshot files: the state after journal record `seq`, one file per snapshot
// in the work dir, written whole under a temporary name, fsynced, renamed into
// place and the directory fsynced, so a file under its final name is always
// complete. The database only names it (Store::RecordSnapshot); start-up loads
// the file it names and verifies size and checksum. These functions touch no
// SQLite, no libuv, no lock and no logger, so they may run on any thread (the
// reactor's snapshot replica writes from the thread pool) or process.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dispatch::storage {

// What the database records about a snapshot file.
struct SnapshotFileInfo {
  uint64_t seq = 0;   // the file holds the state after record `seq`
  std::string name;   // file name inside the work dir (no directory part)
  uint64_t size = 0;  // bytes of the snapshot body (the file adds a header)
  uint32_t crc = 0;   // SnapshotChecksum(seq, body)
};

// Bytes of the header in front of the body: magic, seq, size, crc, and a
// CRC32C of those.
inline constexpr size_t kSnapshotFileHeaderBytes = 32;

// "snapshot-<seq, 20 digits>-<crc, 8 hex>.snap": the checksum in the name
// means a second snapshot at the same seq with other bytes never replaces
// a file the database names.
std::string SnapshotFileName(uint64_t seq, uint32_t crc);
// Where WriteSnapshotFile writes before the rename: "snapshot-<seq>.snap.tmp".
std::string SnapshotTempFileName(uint64_t seq);
// True for names SnapshotFileName or SnapshotTempFileName make (so start-up
// can remove the ones the database does not name).
bool IsSnapshotFileName(std::string_view name);

// Writes `body` as the snapshot after record `seq` into `work_dir` (temp
// file, fsync, rename, fsync of the directory) and returns what to record.
// Unavailable naming the file on any I/O error; the temp file is removed.
// Only open/write/sync_file_range/fsync/rename/unlink/close: safe anywhere.
Result<SnapshotFileInfo> WriteSnapshotFile(const std::string& work_dir, uint64_t seq,
                                           std::string_view body);

// Reads the file `expected` names and returns its body. DataLoss naming the
// file when it is missing, shorter or longer than recorded, or its header or
// body fails its checksum or disagrees with `expected`.
Result<std::string> ReadSnapshotFile(const std::string& work_dir,
                                     const SnapshotFileInfo& expected);

}  // namespace dispatch::storage
