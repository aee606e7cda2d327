// VerifyWorkDir: the offline check behind `dispatcher --verify`. On a stopped
// work dir (it takes the work dir's lock, so never beside a running
// dispatcher) it reads everything the dispatcher stores and reports what it
// found: the database's own b-tree check (PRAGMA integrity_check), every
// journal record (contiguous sequence numbers, checksums), the snapshot file
// the database names (size, checksums), every dataset definition and closure
// result (checksums; rows and the files of results/), and the journal's end against the high-water mark
// (COMMITTED, see store.h). It changes nothing: its connection is query-only
// and does not checkpoint the WAL when it closes (SQLite may rebuild -shm).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace dispatch::storage {

struct VerifyReport {
  // Each a sentence naming what is missing or damaged; empty: clean.
  std::vector<std::string> damage;
  // Things worth knowing that are not damage (leftover files, a mark that
  // only a machine restart explains).
  std::vector<std::string> notes;
  uint64_t records = 0;  // journal records checked
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  uint64_t snapshot_seq = 0;
  bool has_snapshot = false;
  uint64_t snapshot_bytes = 0;
  uint64_t datasets = 0;
  uint64_t results = 0;
  uint64_t result_bytes = 0;
  uint64_t result_files = 0;  // results kept in files (results/), each checked whole
  uint64_t result_file_bytes = 0;
  bool has_mark = false;
  uint64_t mark_seq = 0;
  bool mark_synced = false;
  bool clean() const { return damage.empty(); }
  // One line: "clean" or "DAMAGED", then what was checked.
  std::string Summary(const std::string& work_dir) const;
};

// At most this many damage lines per kind (records, datasets, ...): a badly
// damaged file does not flood the report. The counts stay exact.
inline constexpr size_t kMaxVerifyLinesPerKind = 20;

// The report; a non-ok Status only when the check could not run at all
// (the work dir is locked by a running dispatcher, or cannot be read).
Result<VerifyReport> VerifyWorkDir(const std::string& work_dir);

}  // namespace dispatch::storage
