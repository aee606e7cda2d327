// Store::Open and its steps: lock the work dir, open and configure the
// connection, check (or create) the schema, prepare every statement once, and
// read the journal's bounds. Any damage found here is DataLoss naming the file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <vector>
#include <system_error>

#include "storage/file_io.h"
#include "storage/format.h"
#include "storage/store.h"
#include "storage/work_dir_lock.h"

namespace dispatch::storage {
namespace {

// INITIALIZED (file_io.h) is written once the work dir holds a dispatch
// database; if it exists but the database is empty or missing, the journal
// was lost, and starting afresh would silently forget every acknowledged
// change.
constexpr const char* kInitializedMarker = kInitializedMarkerName;

// SQLite's WAL layout: a header, then frames of a header and one page.
constexpr int64_t kWalHeaderBytes = 32;
constexpr int64_t kWalFrameHeaderBytes = 24;

bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Errors that mean the file itself is bad are reported as DataLoss naming it.
Status AsDamage(Status status, const std::string& db_path) {
  if (status.code() == StatusCode::kDataLoss) {
    return DataLossError("journal database " + db_path +
                         " is damaged or not a database: " + status.message());
  }
  return status;
}

}  // namespace

Store::Store(StoreOptions options) : options_(std::move(options)) {
  db_path_ = options_.work_dir + "/dispatch.db";
}

Store::~Store() = default;

Result<std::unique_ptr<Store>> Store::Open(StoreOptions options) {
  if (options.work_dir.empty()) return InvalidArgumentError("StoreOptions.work_dir is empty");
  if (options.inline_checkpoint_max_frames < 0 || options.wal_restart_frames <= 0) {
    return InvalidArgumentError(
        "StoreOptions.inline_checkpoint_max_frames must not be negative and "
        "StoreOptions.wal_restart_frames must be positive");
  }
  if (options.checkpoint_wal_frames <= 0) {
    return InvalidArgumentError("StoreOptions.checkpoint_wal_frames must be positive, got " +
                                std::to_string(options.checkpoint_wal_frames));
  }
  if (sqlite3_threadsafe() == 0) {
    return FailedPreconditionError(
        "SQLite was built without thread support; the Checkpointer needs it");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.work_dir, ec);
  if (ec) {
    return UnavailableError("cannot create work dir " + options.work_dir + ": " + ec.message());
  }
  std::unique_ptr<Store> store(new Store(std::move(options)));
  auto lock = WorkDirLock::Acquire(store->options_.work_dir);
  if (!lock.ok()) return lock.status();
  store->lock_ = std::move(lock).value();

  DISPATCH_RETURN_IF_ERROR(AsDamage(store->OpenDatabase(), store->db_path_));
  DISPATCH_RETURN_IF_ERROR(AsDamage(store->CheckOrCreateSchema(), store->db_path_));
  DISPATCH_RETURN_IF_ERROR(AsDamage(store->PrepareStatements(), store->db_path_));
  DISPATCH_RETURN_IF_ERROR(AsDamage(store->LoadBounds(), store->db_path_));
  // Before anything is removed or written: a refused start leaves the work
  // dir as it found it (but for the lock and SQLite's -shm).
  DISPATCH_RETURN_IF_ERROR(store->CheckCommitMark());
  DISPATCH_RETURN_IF_ERROR(store->VerifyDatasets());
  DISPATCH_RETURN_IF_ERROR(store->RemoveStaleSnapshotFiles());
  DISPATCH_RETURN_IF_ERROR(store->PreallocateWal());
  DISPATCH_RETURN_IF_ERROR(store->CreateResultDir());
  return store;
}

Status Store::OpenDatabase() {
  // NOMUTEX: only the loop thread uses this connection.
  auto db = OpenSqlite(db_path_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                       "journal database " + db_path_);
  if (!db.ok()) return db.status();
  db_ = std::move(db).value();
  return ConfigureConnection();
}

Status Store::ConfigureConnection() {
  sqlite3* db = db_.get();
  const std::string what = "configuring " + db_path_;
  sqlite3_busy_timeout(db, options_.busy_timeout_ms);
  auto mode = QueryText(db, "PRAGMA journal_mode=WAL", what + " (journal_mode=WAL)");
  if (!mode.ok()) return mode.status();
  if (*mode != "wal") {
    return FailedPreconditionError(db_path_ + " cannot use WAL mode (journal_mode is " + *mode +
                                   ")");
  }
  DISPATCH_RETURN_IF_ERROR(ExecSql(db,
                                   options_.synchronous == Synchronous::kFull && !defers_sync()
                                       ? "PRAGMA synchronous=FULL"
                                       : "PRAGMA synchronous=NORMAL",
                                   what + " (synchronous)"));
  // Debian builds SQLite with secure_delete on: every page a delete frees is
  // overwritten with zeros, so releasing 16 MiB of result rows wrote 16 MiB
  // of WAL frames on the loop thread (measured: 60-90 ms stalls while a
  // coordinator fetched and released 256 KiB results). FAST zeroes what is
  // deleted from b-tree pages, which are written anyway, and leaves the
  // freed overflow pages alone; the next write of them overwrites them.
  DISPATCH_RETURN_IF_ERROR(ExecSql(db, "PRAGMA secure_delete=FAST", what + " (secure_delete)"));
  auto page_size = QueryInt(db, "PRAGMA page_size", what + " (page_size)");
  if (!page_size.ok()) return page_size.status();
  page_size_ = *page_size;
  if (options_.max_db_bytes > 0) {
    const uint64_t pages = std::max<uint64_t>(1, options_.max_db_bytes / *page_size);
    const std::string sql = "PRAGMA max_page_count=" + std::to_string(pages);
    DISPATCH_RETURN_IF_ERROR(ExecSql(db, sql.c_str(), what + " (max_page_count)"));
  }
  const int64_t sqlite_max = sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1);
  // Snapshots live in files of their own: SQLite's blob limit is not theirs.
  for (size_t limit :
       {options_.max_record_bytes, options_.max_dataset_bytes, options_.max_result_bytes}) {
    if (static_cast<int64_t>(limit) > sqlite_max) {
      return InvalidArgumentError("a StoreOptions size limit (" + std::to_string(limit) +
                                  " bytes) exceeds SQLite's blob limit of " +
                                  std::to_string(sqlite_max));
    }
  }
  const std::string limit =
      "PRAGMA journal_size_limit=" + std::to_string(options_.wal_size_limit_bytes);
  DISPATCH_RETURN_IF_ERROR(ExecSql(db, limit.c_str(), what + " (journal_size_limit)"));
  // Never checkpoint inline on the loop thread (it stalls the loop for tens of
  // ms). sqlite3_wal_autocheckpoint(0) removes SQLite's hook; ours only counts.
  sqlite3_wal_autocheckpoint(db, 0);
  sqlite3_wal_hook(db, &Store::OnWalCommit, this);
  // A WAL left by a run that did not close cleanly still needs a checkpoint:
  // estimate its frames from its size. An extended WAL (PreallocateWal) reads
  // as full: one checkpoint early, and the first commit's WAL hook brings the
  // true count.
  struct stat wal;
  if (stat((db_path_ + "-wal").c_str(), &wal) == 0 && wal.st_size > kWalHeaderBytes) {
    wal_frames_ = static_cast<int>(
        std::min<int64_t>((wal.st_size - kWalHeaderBytes) / (page_size_ + kWalFrameHeaderBytes),
                          std::numeric_limits<int>::max()));
  }
  return Status::Ok();
}

Status Store::PreallocateWal() {
  // Only a commit's own fsync gains: with kNormal the WAL is synced at
  // checkpoints only (and the HA cache never needs it on the takeover path).
  if (!options_.preallocate_wal || options_.synchronous != Synchronous::kFull) return Status::Ok();
  sqlite3* db = db_.get();
  // SQLite opens the WAL with the first transaction: LoadBounds read.
  sqlite3_file* wal = nullptr;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) != SQLITE_OK ||
      wal == nullptr || wal->pMethods == nullptr) {
    return Status::Ok();
  }
  const std::string wal_path = db_path_ + "-wal";
  int64_t target = kWalHeaderBytes + static_cast<int64_t>(options_.wal_restart_frames) *
                                         (page_size_ + kWalFrameHeaderBytes);
  target = std::min<int64_t>(target, static_cast<int64_t>(options_.wal_size_limit_bytes));
  sqlite3_int64 size = 0;
  int rc = wal->pMethods->xFileSize(wal, &size);
  if (rc != SQLITE_OK) return SqliteStatus(nullptr, rc, "cannot read the size of " + wal_path);
  if (size >= target) return Status::Ok();
  // 64 KiB a call: SQLite's unix VFS masks a write's length to 17 bits.
  const std::vector<char> zeros(64 << 10, 0);
  for (int64_t offset = size; offset < target;) {
    const int n = static_cast<int>(std::min<int64_t>(zeros.size(), target - offset));
    rc = wal->pMethods->xWrite(wal, zeros.data(), n, offset);
    if (rc == SQLITE_FULL) {
      // Not the disk failing us yet: start as before, in the space there is.
      const int truncated = wal->pMethods->xTruncate(wal, size);
      if (truncated != SQLITE_OK) {
        return SqliteStatus(nullptr, truncated,
                            "cannot cut " + wal_path + " back to " + std::to_string(size) +
                                " bytes after the disk was full");
      }
      open_warnings_.push_back("the disk is full: " + wal_path + " was not extended to " +
                               std::to_string(target) + " bytes (commits will cost more)");
      return Status::Ok();
    }
    if (rc != SQLITE_OK) {
      return SqliteStatus(nullptr, rc,
                          "cannot extend " + wal_path + " to " + std::to_string(target) + " bytes");
    }
    offset += n;
  }
  // The new size and blocks made durable here, not by the first commit's sync.
  rc = wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL);
  if (rc != SQLITE_OK) return SqliteStatus(nullptr, rc, "cannot sync " + wal_path + " after extending it");
  return Status::Ok();
}

Status Store::CheckOrCreateSchema() {
  sqlite3* db = db_.get();
  const std::string what = "reading the header of " + db_path_;
  auto app_id = QueryInt(db, "PRAGMA application_id", what);
  if (!app_id.ok()) return app_id.status();
  auto version = QueryInt(db, "PRAGMA user_version", what);
  if (!version.ok()) return version.status();
  auto objects = QueryInt(db, "SELECT count(*) FROM sqlite_schema", what);
  if (!objects.ok()) return objects.status();
  const std::string marker = options_.work_dir + "/" + kInitializedMarker;

  if (*app_id == 0 && *version == 0 && *objects == 0) {
    if (FileExists(marker)) {
      return DataLossError("journal database " + db_path_ + " is empty or was replaced, but " +
                           marker +
                           " says this work dir held a dispatcher's journal; refusing to start "
                           "with no state (remove " +
                           marker + " to start afresh on purpose)");
    }
    const std::string create = "creating the schema in " + db_path_;
    DISPATCH_RETURN_IF_ERROR(ExecSql(db, "BEGIN IMMEDIATE", create));
    const std::string pragmas = "PRAGMA application_id=" + std::to_string(kApplicationId) +
                                ";PRAGMA user_version=" + std::to_string(kFormatVersion) + ";";
    Status status = ExecSql(db, kCreateSchemaSql, create);
    if (status.ok()) status = ExecSql(db, pragmas.c_str(), create);
    if (status.ok()) status = ExecSql(db, "COMMIT", create);
    if (!status.ok()) {
      if (sqlite3_get_autocommit(db) == 0) (void)ExecSql(db, "ROLLBACK", create);
      return status;
    }
    created_schema_ = true;
    // The marker says "this dir held a journal": it must never be durable
    // before the schema is, or a power cut in between leaves an empty
    // database beside it and every later start refuses (found by the
    // power-loss suite). With a deferred fsync the COMMIT above is only in
    // the page cache.
    DISPATCH_RETURN_IF_ERROR(SyncWalBeforeMarker());
    return WriteInitializedMarker(options_.work_dir);
  }
  if (*app_id != kApplicationId) {
    return FailedPreconditionError(
        db_path_ + " is not a dispatch journal (application_id " + std::to_string(*app_id) +
        ", expected " + std::to_string(kApplicationId) +
        "): its header is damaged or the file belongs to something else");
  }
  if (*version == 1) {
    DISPATCH_RETURN_IF_ERROR(MigrateFromVersion1());
  } else if (*version == 2) {
    DISPATCH_RETURN_IF_ERROR(UpgradeFromVersion2());
  } else if (*version != kFormatVersion) {
    // Written by a newer release (or damaged): never guess at its records.
    // Refused before anything in the work dir is written.
    return FailedPreconditionError(
        db_path_ + " has format version " + std::to_string(*version) +
        ", which this dispatcher does not read (it reads format versions 1 to " +
        std::to_string(kFormatVersion) +
        "): start a dispatcher of the release that wrote it, or a newer one");
  }
  auto tables = QueryInt(db,
                         "SELECT count(*) FROM sqlite_schema WHERE type='table' AND name IN "
                         "('journal','snapshot_file','dataset')",
                         what);
  if (!tables.ok()) return tables.status();
  if (*tables != kSchemaTableCount - 1) {
    return DataLossError("journal database " + db_path_ + " lacks " +
                         std::to_string(kSchemaTableCount - 1 - *tables) +
                         " of its tables (journal, snapshot_file, dataset)");
  }
  // The result table came in the same release as format version 2: a
  // database migrated from version 1 gets it now (its journal holds results
  // inline).
  DISPATCH_RETURN_IF_ERROR(ExecSql(db, kCreateResultTableSql, "adding the result table to " + db_path_));
  if (!FileExists(marker)) {
    DISPATCH_RETURN_IF_ERROR(SyncWalBeforeMarker());
    return WriteInitializedMarker(options_.work_dir);
  }
  return Status::Ok();
}

Status Store::SyncWalBeforeMarker() {
  if (!defers_sync()) return Status::Ok();  // every COMMIT synced already
  auto syncer = WalSyncer::Open(db_path_ + "-wal");
  if (!syncer.ok()) return syncer.status();
  return (*syncer)->Sync();
}

Status Store::PrepareStatements() {
  sqlite3* db = db_.get();
  struct Entry {
    Statement* stmt;
    const char* sql;
  };
  const Entry entries[] = {
      {&begin_, "BEGIN IMMEDIATE"},
      {&commit_, "COMMIT"},
      {&rollback_, "ROLLBACK"},
      {&insert_record_, "INSERT INTO journal (seq, crc, body) VALUES (?1, ?2, ?3)"},
      {&select_records_, "SELECT seq, crc, body FROM journal WHERE seq > ?1 ORDER BY seq"},
      {&insert_snapshot_,
       "INSERT OR REPLACE INTO snapshot_file (seq, name, size, crc) VALUES (?1, ?2, ?3, ?4)"},
      {&select_old_snapshots_, "SELECT name FROM snapshot_file WHERE seq < ?1"},
      {&delete_old_snapshots_, "DELETE FROM snapshot_file WHERE seq < ?1"},
      {&truncate_journal_, "DELETE FROM journal WHERE seq <= ?1"},
      // length() of a blob reads the record's header, not its overflow pages.
      {&select_record_sizes_,
       "SELECT seq, length(body) FROM journal WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq"},
      {&select_snapshot_,
       "SELECT seq, name, size, crc FROM snapshot_file ORDER BY seq DESC LIMIT 1"},
      {&put_dataset_,
       "INSERT INTO dataset (key, crc, body) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO UPDATE "
       "SET crc = excluded.crc, body = excluded.body"},
      {&get_dataset_, "SELECT crc, body FROM dataset WHERE key = ?1"},
      {&put_result_, "INSERT OR REPLACE INTO result (closure, crc, body) VALUES (?1, ?2, ?3)"},
      {&delete_result_, "DELETE FROM result WHERE closure = ?1"},
      {&get_result_, "SELECT crc, length(body) FROM result WHERE closure = ?1"},
      {&list_results_, "SELECT closure FROM result ORDER BY closure"},
  };
  for (const Entry& entry : entries) {
    auto stmt = Statement::Prepare(db, entry.sql);
    if (!stmt.ok()) return stmt.status();
    *entry.stmt = std::move(stmt).value();
  }
  return Status::Ok();
}

Status Store::LoadBounds() {
  sqlite3* db = db_.get();
  const std::string what = "reading the journal bounds of " + db_path_;
  // One aggregate per query: SQLite answers a lone min() or max() on the rowid
  // from the b-tree's edge; min() and max() together would scan every row.
  struct Bound {
    std::string sql;
    bool present = false;
    int64_t value = 0;
  };
  auto load = [&](Bound& bound) -> Status {
    auto stmt = Statement::Prepare(db, bound.sql.c_str());
    if (!stmt.ok()) return stmt.status();
    const int rc = stmt->Step();
    if (rc != SQLITE_ROW) return SqliteStatus(db, rc, what);
    bound.present = !stmt->ColumnIsNull(0);
    bound.value = bound.present ? stmt->ColumnInt(0) : 0;
    return Status::Ok();
  };
  Bound snapshot{"SELECT max(seq) FROM snapshot_file"};
  Bound first{"SELECT min(seq) FROM journal"};
  Bound last{"SELECT max(seq) FROM journal"};
  for (Bound* bound : {&snapshot, &first, &last}) DISPATCH_RETURN_IF_ERROR(load(*bound));
  has_snapshot_ = snapshot.present;
  snapshot_seq_ = static_cast<uint64_t>(snapshot.value);
  // Records up to the snapshot may still be there (truncation is sliced);
  // what replay needs is that the journal goes on right after it.
  Bound after{"SELECT min(seq) FROM journal WHERE seq > " + std::to_string(snapshot_seq_)};
  DISPATCH_RETURN_IF_ERROR(load(after));
  last_seq_ = snapshot_seq_;
  journal_first_seq_ = snapshot_seq_ + 1;
  if (first.present) {
    const int64_t next = after.present ? after.value : first.value;
    if (first.value <= 0 || (!has_snapshot_ && first.value != 1) ||
        (next > static_cast<int64_t>(snapshot_seq_) &&
         static_cast<uint64_t>(next) != snapshot_seq_ + 1)) {
      const int64_t shown = has_snapshot_ ? next : first.value;
      const std::string base =
          has_snapshot_ ? "the latest snapshot is at record " + std::to_string(snapshot_seq_)
                        : "there is no snapshot";
      return DataLossError("journal in " + db_path_ + " starts at record " +
                           std::to_string(shown) + " but " + base + ": expected record " +
                           std::to_string(snapshot_seq_ + 1) + " first");
    }
    journal_first_seq_ = static_cast<uint64_t>(first.value);
    last_seq_ = std::max<uint64_t>(snapshot_seq_, static_cast<uint64_t>(last.value));
  }
  if (has_snapshot_) {
    ScopedReset reset(select_snapshot_);
    const int rc = select_snapshot_.Step();
    if (rc != SQLITE_ROW) return SqliteStatus(db, rc, what + " (latest snapshot)");
    snapshot_file_ = std::string(select_snapshot_.ColumnBlob(1));
    latest_snapshot_ = SnapshotFileInfo{snapshot_seq_, snapshot_file_,
                                        static_cast<uint64_t>(select_snapshot_.ColumnInt(2)),
                                        static_cast<uint32_t>(select_snapshot_.ColumnInt(3))};
  }
  return Status::Ok();
}

Status Store::CheckCommitMark() {
  auto found = CommitMark::Read(options_.work_dir);
  if (!found.ok()) return found.status();
  const std::string mark_path = options_.work_dir + "/" + kCommitMarkFileName;
  bool reset = created_schema_;
  if (!created_schema_ && found->has_value() && last_seq_ < (*found)->seq) {
    const CommitMarkValue& mark = **found;
    const std::string missing = mark.seq == last_seq_ + 1
                                    ? "record " + std::to_string(mark.seq) + " is"
                                    : "records " + std::to_string(last_seq_ + 1) + ".." +
                                          std::to_string(mark.seq) + " are";
    // Only a mark written before the fsync (synchronous=normal) may claim
    // more than a power loss leaves, and only if the machine restarted since.
    const uint64_t boot = CurrentBootId();
    const bool same_boot = mark.boot_id != 0 && mark.boot_id == boot;
    if (mark.synced || same_boot) {
      return DataLossError(
          "journal database " + db_path_ + " is damaged or lost its tail: the journal ends at record " +
          std::to_string(last_seq_) + ", but " + mark_path + " says records up to " +
          std::to_string(mark.seq) + " were committed" +
          (mark.synced ? " and fsynced" : " and the machine has not restarted since") + ": " +
          missing + " missing (the WAL " + db_path_ +
          "-wal cut or removed, or rows deleted). Refusing to start without them; restore the "
          "work dir, or remove " + mark_path + " to accept the loss");
    }
    open_warnings_.push_back("journal " + missing +
                             " lost: committed with synchronous=normal, not yet fsynced, and the "
                             "machine restarted since (the documented cost of synchronous=normal)");
    reset = true;
  }
  if (!created_schema_ && !found->has_value() && last_seq_ > 0) {
    open_warnings_.push_back(mark_path +
                             " was missing (a work dir of an older version?): the journal's end "
                             "(record " + std::to_string(last_seq_) +
                             ") could not be checked this time; it is written from now on");
  }
  CommitMarkValue initial;
  initial.seq = last_seq_;
  initial.boot_id = CurrentBootId();
  auto mark = CommitMark::Open(options_.work_dir, initial, reset);
  if (!mark.ok()) return mark.status();
  mark_ = std::move(mark).value();
  return Status::Ok();
}

Status Store::VerifyDatasets() {
  // Definitions are few and small next to the journal; reading them all
  // here means a damaged one stops the start instead of the first read.
  auto select = Statement::Prepare(db_.get(), "SELECT key, crc, body FROM dataset");
  if (!select.ok()) return AsDamage(select.status(), db_path_);
  while (true) {
    const int rc = select->Step();
    if (rc == SQLITE_DONE) return Status::Ok();
    if (rc != SQLITE_ROW) {
      return AsDamage(SqliteStatus(db_.get(), rc, "reading the dataset table of " + db_path_),
                      db_path_);
    }
    const std::string_view key = select->ColumnBlob(0);
    const std::string_view body = select->ColumnBlob(2);
    const int64_t stored = select->ColumnInt(1);
    const uint32_t computed = DatasetChecksum(key, body);
    if (stored != static_cast<int64_t>(computed)) {
      return DataLossError("dataset " + QuoteKey(key) + " in " + db_path_ +
                           " fails its checksum (stored " + std::to_string(stored) + ", computed " +
                           std::to_string(computed) + "): the dataset table is damaged");
    }
  }
}

Status Store::RemoveStaleSnapshotFiles() {
  // Leftovers of a snapshot that never got recorded, or of one replaced
  // before its file was removed: nobody will ever read them.
  std::error_code ec;
  std::vector<std::string> stale;
  for (const auto& entry : std::filesystem::directory_iterator(options_.work_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (IsSnapshotFileName(name) && name != snapshot_file_) stale.push_back(name);
  }
  if (ec) {
    return UnavailableError("cannot list work dir " + options_.work_dir + ": " + ec.message());
  }
  for (const std::string& name : stale) unlink((options_.work_dir + "/" + name).c_str());
  return Status::Ok();
}

Status Store::MigrateFromVersion1() {
  // Version 1 kept the latest snapshot as a blob in table `snapshot`. Write it
  // out as a file first (a crash here leaves version 1 and a stale file), then
  // name it, drop the old table and bump the version in one transaction.
  sqlite3* db = db_.get();
  const std::string what = "migrating " + db_path_ + " from format version 1";
  std::optional<SnapshotFileInfo> info;
  {
    auto select = Statement::Prepare(db, "SELECT seq, crc, body FROM snapshot ORDER BY seq DESC LIMIT 1");
    // A header that says version 1 over a database without version 1's
    // table is a damaged header, not a migration to attempt.
    if (!select.ok()) {
      return DataLossError(db_path_ + " says format version 1 but has no snapshot table (" +
                           select.status().message() + ")");
    }
    const int rc = select->Step();
    if (rc == SQLITE_ROW) {
      const uint64_t seq = static_cast<uint64_t>(select->ColumnInt(0));
      const std::string_view body = select->ColumnBlob(2);
      if (select->ColumnInt(1) != static_cast<int64_t>(SnapshotChecksum(seq, body))) {
        return DataLossError("snapshot at record " + std::to_string(seq) + " in " + db_path_ +
                             " fails its checksum");
      }
      auto written = WriteSnapshotFile(options_.work_dir, seq, body);
      if (!written.ok()) return written.status();
      info = *written;
    } else if (rc != SQLITE_DONE) {
      return SqliteStatus(db, rc, what);
    }
  }
  DISPATCH_RETURN_IF_ERROR(ExecSql(db, "BEGIN IMMEDIATE", what));
  Status status = ExecSql(db, kCreateSnapshotFileTableSql, what);
  if (status.ok() && info.has_value()) {
    const std::string insert = "INSERT INTO snapshot_file (seq, name, size, crc) VALUES (" +
                               std::to_string(info->seq) + ", '" + info->name + "', " +
                               std::to_string(info->size) + ", " + std::to_string(info->crc) + ")";
    status = ExecSql(db, insert.c_str(), what);
  }
  if (status.ok()) status = ExecSql(db, "DROP TABLE snapshot", what);
  if (status.ok()) {
    const std::string pragma = "PRAGMA user_version=" + std::to_string(kFormatVersion);
    status = ExecSql(db, pragma.c_str(), what);
  }
  if (status.ok()) status = ExecSql(db, "COMMIT", what);
  if (!status.ok() && sqlite3_get_autocommit(db) == 0) (void)ExecSql(db, "ROLLBACK", what);
  return status;
}

Status Store::UpgradeFromVersion2() {
  // Same schema; the number says result files may exist.
  const std::string pragma = "PRAGMA user_version=" + std::to_string(kFormatVersion);
  return ExecSql(db_.get(), pragma.c_str(), "upgrading " + db_path_ + " from format version 2");
}

Status Store::CreateResultDir() {
  const std::string dir = result_dir();
  if (mkdir(dir.c_str(), 0755) == 0) return FsyncDir(options_.work_dir);
  if (errno != EEXIST) return UnavailableError("cannot create " + dir + ": " + ErrnoText(errno));
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return FailedPreconditionError(dir + " exists but is not a directory; the dispatcher keeps "
                                   "large closure results there");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Checkpointer>> Store::NewCheckpointer() {
  return Checkpointer::Open(db_path_, options_.wal_size_limit_bytes);
}

Result<std::unique_ptr<WalSyncer>> Store::NewWalSyncer() { return WalSyncer::Open(db_path_ + "-wal"); }

Result<std::unique_ptr<JournalReader>> Store::NewJournalReader() {
  return JournalReader::Open(db_path_);
}

Result<std::unique_ptr<TablesReader>> Store::NewTablesReader() { return TablesReader::Open(db_path_); }

Result<std::unique_ptr<DatabaseBackup>> Store::StartBackup(const std::string& dest_path) {
  if (failed()) {
    return FailedPreconditionError("no backup of " + db_path_ + " after a failed write: " +
                                   failure_.ToString());
  }
  return DatabaseBackup::Start(db_.get(), db_path_, dest_path);
}

int Store::OnWalCommit(void* self, sqlite3* /*db*/, const char* /*name*/, int frames) {
  Store* store = static_cast<Store*>(self);
  // The WAL only shrinks when SQLite restarted it from the beginning; then
  // none of its (new) frames are copied yet. Only this connection and the
  // Checkpointer's write, and a restart there is handed to NoteCheckpoint
  // before this connection commits again: a shrink seen here is a restart
  // made by this commit.
  if (frames < store->wal_frames_) {
    store->backfilled_frames_ = 0;
    if (store->wal_frames_known_) ++store->wal_restarts_on_loop_;
  }
  store->wal_frames_ = frames;
  store->wal_frames_known_ = true;
  return SQLITE_OK;
}

bool Store::NoteCheckpoint(const CheckpointStats& done) {
  if (done.restarted_wal) {
    wal_frames_ = done.wal_frames;
    backfilled_frames_ = 0;
    wal_frames_known_ = true;
    return false;
  }
  // The off-loop pass saw the WAL as it was then; if it has restarted since
  // (fewer frames now than the pass saw), its progress says nothing about it.
  if (done.wal_frames <= wal_frames_) {
    backfilled_frames_ = std::max(backfilled_frames_, done.checkpointed_frames);
  }
  const int remaining = wal_frames_ - backfilled_frames_;
  const bool long_wal = wal_frames_ >= options_.wal_restart_frames;
  const bool too_long_wal = wal_frames_ / 2 >= options_.wal_restart_frames;
  return remaining > 0 && long_wal &&
         (remaining <= options_.inline_checkpoint_max_frames || too_long_wal);
}

Result<CheckpointStats> Store::FinishCheckpoint(const CheckpointStats& done) {
  const bool copy_rest = NoteCheckpoint(done);
  CheckpointStats inline_stats;
  inline_stats.wal_frames = wal_frames_;
  inline_stats.checkpointed_frames = backfilled_frames_;
  const int remaining = wal_frames_ - backfilled_frames_;
  if (!copy_rest) return inline_stats;
  int log = 0;
  int copied = 0;
  const int rc =
      sqlite3_wal_checkpoint_v2(db_.get(), "main", SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
  inline_stats.passes = 1;
  if (rc == SQLITE_BUSY) {  // a checkpoint is running after all: later
    inline_stats.busy = true;
    return inline_stats;
  }
  if (rc != SQLITE_OK) {
    return SqliteStatus(db_.get(), rc,
                        "checkpointing the last " + std::to_string(remaining) + " WAL frames of " +
                            db_path_ + " on the loop thread");
  }
  inline_stats.wal_frames = log;
  inline_stats.checkpointed_frames = copied;
  wal_frames_ = log;
  backfilled_frames_ = copied;
  return inline_stats;
}

}  // namespace dispatch::storage
