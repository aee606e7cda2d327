#include "storage/result_reader.h"

#include <cstring>

#include "common/checksum.h"
#include "storage/format.h"
#include "storage/result_file.h"

namespace dispatch::storage {

Status ReadResultRow(sqlite3* db, Statement& get_result, const std::string& db_path,
                     uint64_t closure_id, char* dest, size_t size) {
  const std::string name = "the result of closure " + std::to_string(closure_id);
  int64_t stored = 0;
  int64_t stored_size = 0;
  {
    ScopedReset reset(get_result);
    get_result.BindInt(1, static_cast<int64_t>(closure_id));
    const int rc = get_result.Step();
    if (rc == SQLITE_DONE) return NotFoundError(name + " is not in the result table of " + db_path);
    if (rc != SQLITE_ROW) return SqliteStatus(db, rc, "reading " + name + " from " + db_path);
    stored = get_result.ColumnInt(0);
    stored_size = get_result.ColumnInt(1);
  }
  if (stored_size != static_cast<int64_t>(size)) {
    return DataLossError(name + " in " + db_path + " is " + std::to_string(stored_size) +
                         " bytes, not the " + std::to_string(size) + " bytes expected");
  }
  // Straight into the caller's buffer with incremental blob I/O:
  // sqlite3_column_blob would first assemble a copy of a result that spans
  // many overflow pages.
  const std::string what = "reading " + name + " from " + db_path;
  auto fail = [&](Status status) {
    std::memset(dest, 0, size);
    return status;
  };
  if (size > 0) {
    sqlite3_blob* raw = nullptr;
    int rc = sqlite3_blob_open(db, "main", "result", "body", static_cast<sqlite3_int64>(closure_id),
                               0, &raw);
    std::unique_ptr<sqlite3_blob, int (*)(sqlite3_blob*)> blob(raw, sqlite3_blob_close);
    if (rc != SQLITE_OK) return fail(SqliteStatus(db, rc, what));
    if (sqlite3_blob_bytes(raw) != static_cast<int>(size)) {
      return fail(DataLossError(what + ": its size changed while reading"));
    }
    rc = sqlite3_blob_read(raw, dest, static_cast<int>(size), 0);
    if (rc != SQLITE_OK) {
      Status status = SqliteStatus(db, rc, what);
      if (status.code() == StatusCode::kDataLoss) {
        status = DataLossError(name + " is damaged: " + status.message());
      }
      return fail(status);
    }
  }
  const uint32_t computed = ResultChecksum(closure_id, std::string_view(dest, size));
  if (stored != static_cast<int64_t>(computed)) {
    return fail(DataLossError(name + " in " + db_path + " fails its checksum (stored " +
                              std::to_string(stored) + ", computed " + std::to_string(computed) +
                              "): the stored result is damaged"));
  }
  return Status::Ok();
}

namespace {

// DataLoss naming the closure and `where` when the `location.size` bytes at
// `dest` do not have the CRC32C the journal recorded (then zeroed).
Status CheckResultCrc(const ResultLocation& location, const std::string& where, char* dest) {
  const uint32_t crc = Crc32c(dest, location.size);
  if (crc == location.crc) return Status::Ok();
  std::memset(dest, 0, location.size);
  return DataLossError("the result of closure " + std::to_string(location.closure_id) + " in " +
                       where + " has CRC32C " + std::to_string(crc) +
                       ", but the journal recorded " + std::to_string(location.crc) +
                       ": not served");
}

}  // namespace

Status ReadResultAt(sqlite3* db, Statement& get_result, const std::string& db_path,
                    const std::string& result_dir, const ResultLocation& location, char* dest) {
  Status status;
  std::string where;
  if (location.in_file) {
    status = ReadResultFile(result_dir, location.closure_id, location.file_attempt, dest,
                            location.size);
    where = result_dir + "/" + ResultFileName(location.closure_id, location.file_attempt);
  } else {
    status = ReadResultRow(db, get_result, db_path, location.closure_id, dest, location.size);
    where = db_path;
  }
  if (!status.ok()) return status;
  return CheckResultCrc(location, where, dest);
}

Result<std::unique_ptr<ResultReader>> ResultReader::Open(const std::string& db_path,
                                                         std::string result_dir) {
  // NOMUTEX: one thread at a time uses this connection (the contract above).
  auto db = OpenSqlite(db_path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                       "result reader connection to " + db_path);
  if (!db.ok()) return db.status();
  sqlite3_wal_autocheckpoint(db->get(), 0);
  // Off the loop, a reader may wait out a WAL restart rather than fail.
  sqlite3_busy_timeout(db->get(), 1000);
  auto get_result = Statement::Prepare(db->get(), "SELECT crc, length(body) FROM result WHERE closure = ?1");
  if (!get_result.ok()) return get_result.status();
  return std::unique_ptr<ResultReader>(new ResultReader(
      db_path, std::move(result_dir), std::move(db).value(), std::move(get_result).value()));
}

Status ResultReader::Read(const ResultLocation& location, char* dest) {
  if (location.in_file) {
    return ReadResultAt(db_.get(), get_result_, db_path_, result_dir_, location, dest);
  }
  // One read transaction for the row's size and its bytes: a release
  // committed between the two would otherwise look like damage.
  const std::string what = "reading the result table of " + db_path_;
  DISPATCH_RETURN_IF_ERROR(ExecSql(db_.get(), "BEGIN", what));
  Status status = ReadResultAt(db_.get(), get_result_, db_path_, result_dir_, location, dest);
  // A read transaction has nothing to lose; its end changes nothing.
  (void)ExecSql(db_.get(), "COMMIT", what);
  return status;
}

}  // namespace dispatch::storage
