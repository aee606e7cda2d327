#include "storage/verify.h"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <system_error>

#include "storage/commit_mark.h"
#include "storage/format.h"
#include "storage/result_file.h"
#include "storage/snapshot_file.h"
#include "storage/sqlite.h"
#include "storage/work_dir_lock.h"

namespace dispatch::storage {
namespace {

std::string Range(uint64_t first, uint64_t last) {
  return first == last ? "record " + std::to_string(first) + " is"
                       : "records " + std::to_string(first) + ".." + std::to_string(last) + " are";
}

// Adds `line` to `out` unless its kind already has kMaxVerifyLinesPerKind.
void Add(std::vector<std::string>& out, size_t& of_kind, std::string line) {
  if (++of_kind <= kMaxVerifyLinesPerKind) {
    out.push_back(std::move(line));
  } else if (of_kind == kMaxVerifyLinesPerKind + 1) {
    out.push_back("(more of the same kind not listed)");
  }
}

class Verifier {
 public:
  Verifier(std::string work_dir, sqlite3* db, VerifyReport& report)
      : work_dir_(std::move(work_dir)), db_path_(work_dir_ + "/dispatch.db"), db_(db), r_(report) {}

  void Run() {
    if (!CheckHeader()) return;
    CheckIntegrity();
    CheckJournalAndSnapshot();
    CheckMark();
    CheckDatasets();
    CheckResults();
    CheckResultFiles();
  }

 private:
  void Damage(std::string line) { r_.damage.push_back(std::move(line)); }

  bool CheckHeader() {
    auto app_id = QueryInt(db_, "PRAGMA application_id", "reading the header of " + db_path_);
    auto version = QueryInt(db_, "PRAGMA user_version", "reading the header of " + db_path_);
    if (!app_id.ok() || !version.ok()) {
      Damage("journal database " + db_path_ + " is damaged or not a database: " +
             (!app_id.ok() ? app_id.status() : version.status()).message());
      return false;
    }
    // Version 2 has the same tables; the next start only renumbers it.
    if (*app_id != kApplicationId || (*version != kFormatVersion && *version != 2)) {
      Damage(db_path_ + " is not a dispatch journal of format version 2 or " +
             std::to_string(kFormatVersion) + " (application_id " + std::to_string(*app_id) +
             ", user_version " + std::to_string(*version) + ")");
      return false;
    }
    auto tables = QueryInt(db_,
                           "SELECT count(*) FROM sqlite_schema WHERE type='table' AND name IN "
                           "('journal','snapshot_file','dataset','result')",
                           "reading the schema of " + db_path_);
    if (!tables.ok() || *tables != kSchemaTableCount) {
      Damage("journal database " + db_path_ + " lacks some of its tables (journal, snapshot_file, "
             "dataset, result)");
      return false;
    }
    return true;
  }

  void CheckIntegrity() {
    auto stmt = Statement::Prepare(db_, "PRAGMA integrity_check(20)");
    if (!stmt.ok()) {
      Damage("journal database " + db_path_ + ": integrity_check could not run: " +
             stmt.status().message());
      return;
    }
    int rc;
    while ((rc = stmt->Step()) == SQLITE_ROW) {
      const std::string line(stmt->ColumnBlob(0));
      if (line != "ok") Damage("journal database " + db_path_ + " fails SQLite's integrity_check: " + line);
    }
    if (rc != SQLITE_DONE) {
      Damage(SqliteStatus(db_, rc, "integrity_check of " + db_path_).message());
    }
  }

  void CheckJournalAndSnapshot() {
    // The snapshot the database names (at most one row after RecordSnapshot).
    auto snap = Statement::Prepare(db_, "SELECT seq, name, size, crc FROM snapshot_file ORDER BY seq DESC");
    if (!snap.ok()) {
      Damage(snap.status().message());
      return;
    }
    int rc = snap->Step();
    if (rc == SQLITE_ROW) {
      SnapshotFileInfo info;
      info.seq = static_cast<uint64_t>(snap->ColumnInt(0));
      info.name = std::string(snap->ColumnBlob(1));
      info.size = static_cast<uint64_t>(snap->ColumnInt(2));
      info.crc = static_cast<uint32_t>(snap->ColumnInt(3));
      r_.has_snapshot = true;
      r_.snapshot_seq = info.seq;
      r_.snapshot_bytes = info.size;
      if (!IsSnapshotFileName(info.name) || info.name.find('/') != std::string::npos) {
        Damage("the snapshot record at record " + std::to_string(info.seq) + " in " + db_path_ +
               " is damaged (file '" + info.name + "')");
      } else {
        auto body = ReadSnapshotFile(work_dir_, info);
        if (!body.ok()) Damage(body.status().message());
        named_snapshot_ = info.name;
      }
    } else if (rc != SQLITE_DONE) {
      Damage(SqliteStatus(db_, rc, "reading the snapshot table of " + db_path_).message());
    }
    snap->Reset();

    auto select = Statement::Prepare(db_, "SELECT seq, crc, body FROM journal ORDER BY seq");
    if (!select.ok()) {
      Damage(select.status().message());
      return;
    }
    size_t bad = 0;
    uint64_t previous = 0;
    bool any = false;
    while ((rc = select->Step()) == SQLITE_ROW) {
      const int64_t raw_seq = select->ColumnInt(0);
      const uint64_t seq = static_cast<uint64_t>(raw_seq);
      if (raw_seq <= 0) {
        Add(r_.damage, bad, "journal of " + db_path_ + " holds a record numbered " + std::to_string(raw_seq));
        continue;
      }
      const std::string_view body = select->ColumnBlob(2);
      if (select->ColumnInt(1) != static_cast<int64_t>(RecordChecksum(seq, body))) {
        Add(r_.damage, bad, "journal record " + std::to_string(seq) + " in " + db_path_ +
                                " fails its checksum: the record is damaged");
      }
      if (any && seq != previous + 1) {
        Add(r_.damage, bad, "journal of " + db_path_ + " is missing " + Range(previous + 1, seq - 1));
      }
      if (!any) r_.first_seq = seq;
      any = true;
      previous = seq;
      ++r_.records;
    }
    if (rc != SQLITE_DONE) {
      Damage(SqliteStatus(db_, rc, "reading the journal of " + db_path_ + " after record " +
                                       std::to_string(previous))
                 .message());
    }
    // Replay needs the journal to go on right after the snapshot (records
    // up to it may linger: truncation is sliced) or, without one, from 1.
    const uint64_t base = r_.has_snapshot ? r_.snapshot_seq : 0;
    if (any && r_.first_seq > base + 1) {
      Damage("journal of " + db_path_ + " starts at record " + std::to_string(r_.first_seq) +
             (r_.has_snapshot ? " but the latest snapshot is at record " + std::to_string(base)
                              : " but there is no snapshot") +
             ": " + Range(base + 1, r_.first_seq - 1) + " missing");
    }
    r_.last_seq = std::max(base, any ? previous : 0);

    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(work_dir_, ec)) {
      const std::string name = entry.path().filename().string();
      if (IsSnapshotFileName(name) && name != named_snapshot_) {
        r_.notes.push_back("leftover snapshot file " + name +
                           " (not named by the database; the next start removes it)");
      }
    }
  }

  void CheckMark() {
    auto mark = CommitMark::Read(work_dir_);
    if (!mark.ok()) {
      Damage(mark.status().message());
      return;
    }
    const std::string path = work_dir_ + "/" + kCommitMarkFileName;
    if (!mark->has_value()) {
      r_.notes.push_back(path + " is missing (a work dir of an older version?): the journal's end "
                         "cannot be checked");
      return;
    }
    r_.has_mark = true;
    r_.mark_seq = (*mark)->seq;
    r_.mark_synced = (*mark)->synced;
    if (r_.last_seq >= (*mark)->seq) return;
    const bool same_boot = (*mark)->boot_id != 0 && (*mark)->boot_id == CurrentBootId();
    const std::string line = "the journal ends at record " + std::to_string(r_.last_seq) + ", but " +
                             path + " says records up to " + std::to_string((*mark)->seq) +
                             " were committed: " + Range(r_.last_seq + 1, (*mark)->seq) +
                             " missing (the WAL cut or removed, or rows deleted)";
    if ((*mark)->synced || same_boot) {
      Damage(line);
    } else {
      r_.notes.push_back(line + "; they were committed with synchronous=normal and the machine "
                         "restarted since, so a start accepts the loss");
    }
  }

  // Steps `sql` and hands each row to `row`; a failure to prepare or to
  // read is damage, named with `table`.
  template <typename RowFn>
  void ForEachRow(const char* sql, const char* table, RowFn row) {
    auto select = Statement::Prepare(db_, sql);
    if (!select.ok()) {
      Damage(select.status().message());
      return;
    }
    int rc;
    while ((rc = select->Step()) == SQLITE_ROW) row(*select);
    if (rc != SQLITE_DONE) {
      Damage(SqliteStatus(db_, rc, std::string("reading the ") + table + " table of " + db_path_).message());
    }
  }

  void CheckDatasets() {
    size_t bad = 0;
    ForEachRow("SELECT key, crc, body FROM dataset", "dataset", [&](Statement& row) {
      ++r_.datasets;
      const std::string_view key = row.ColumnBlob(0);
      if (row.ColumnInt(1) != static_cast<int64_t>(DatasetChecksum(key, row.ColumnBlob(2)))) {
        Add(r_.damage, bad, "dataset " + QuoteKey(key) + " in " + db_path_ + " fails its checksum");
      }
    });
  }

  void CheckResults() {
    size_t bad = 0;
    ForEachRow("SELECT closure, crc, body FROM result", "result", [&](Statement& row) {
      ++r_.results;
      const uint64_t closure = static_cast<uint64_t>(row.ColumnInt(0));
      const std::string_view body = row.ColumnBlob(2);
      r_.result_bytes += body.size();
      if (row.ColumnInt(1) != static_cast<int64_t>(ResultChecksum(closure, body))) {
        Add(r_.damage, bad, "the result of closure " + std::to_string(closure) + " in " + db_path_ +
                                " fails its checksum");
      }
    });
  }

  // Every file's header and checksum. Whether the journal still holds a
  // file's closure is the state's business: a file it does not hold (a
  // crash between writing it and journaling the finish, or between the
  // release and the removal) is removed by the next start, not damage.
  void CheckResultFiles() {
    const std::string dir = work_dir_ + "/" + kResultDirName;
    auto listing = ListResultFiles(dir);
    if (!listing.ok()) {
      Damage(listing.status().message());
      return;
    }
    size_t bad = 0;
    for (const ResultFileId& id : listing->files) {
      auto size = CheckResultFile(dir, id);
      if (!size.ok()) {
        Add(r_.damage, bad, size.status().message());
        continue;
      }
      ++r_.result_files;
      r_.result_file_bytes += *size;
    }
    for (const std::string& other : listing->others) {
      r_.notes.push_back(dir + "/" + other + " is not a result file (left alone)");
    }
  }

  const std::string work_dir_;
  const std::string db_path_;
  sqlite3* const db_;
  VerifyReport& r_;
  std::string named_snapshot_;
};

}  // namespace

std::string VerifyReport::Summary(const std::string& work_dir) const {
  std::string out = (clean() ? "work dir " + work_dir + " is clean: "
                             : "work dir " + work_dir + " is DAMAGED (" +
                                   std::to_string(damage.size()) + " findings): ");
  out += std::to_string(records) + " journal records";
  if (records > 0) out += " (" + std::to_string(first_seq) + ".." + std::to_string(last_seq) + ")";
  out += has_snapshot ? ", snapshot at record " + std::to_string(snapshot_seq) + " (" +
                            std::to_string(snapshot_bytes) + " bytes)"
                      : ", no snapshot";
  out += ", " + std::to_string(datasets) + " datasets, " + std::to_string(results) +
         " closure results (" + std::to_string(result_bytes) + " bytes), " +
         std::to_string(result_files) + " result files (" + std::to_string(result_file_bytes) +
         " bytes)";
  out += has_mark ? ", high-water mark at record " + std::to_string(mark_seq) +
                        (mark_synced ? " (synced)" : " (not synced)")
                  : ", no high-water mark";
  return out;
}

Result<VerifyReport> VerifyWorkDir(const std::string& work_dir) {
  VerifyReport report;
  const std::string db_path = work_dir + "/dispatch.db";
  std::error_code ec;
  if (!std::filesystem::is_directory(work_dir, ec)) {
    return NotFoundError("work dir " + work_dir + " does not exist");
  }
  auto lock = WorkDirLock::Acquire(work_dir);
  if (!lock.ok()) return lock.status();
  if (access(db_path.c_str(), F_OK) != 0) {
    report.damage.push_back("journal database " + db_path + " is missing" +
                            (access((work_dir + "/INITIALIZED").c_str(), F_OK) == 0
                                 ? " although INITIALIZED says this work dir held a journal"
                                 : ""));
    return report;
  }
  auto db = OpenSqlite(db_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                       "journal database " + db_path);
  if (!db.ok()) {
    report.damage.push_back(db.status().message());
    return report;
  }
  // Look, do not touch: no checkpoint when this connection closes, no writes.
  sqlite3_db_config(db->get(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  (void)ExecSql(db->get(), "PRAGMA query_only=1", "making the connection read-only");
  Verifier(work_dir, db->get(), report).Run();
  return report;
}

}  // namespace dispatch::storage
