#include "storage/sqlite.h"

#include <cstring>
#include <utility>

namespace dispatch::storage {

namespace {

// Names of the extended codes an operator is likely to meet; the rest are
// reported by number.
const char* ExtendedCodeName(int rc) {
  switch (rc) {
    case SQLITE_IOERR_READ:
      return "SQLITE_IOERR_READ";
    case SQLITE_IOERR_SHORT_READ:
      return "SQLITE_IOERR_SHORT_READ";
    case SQLITE_IOERR_WRITE:
      return "SQLITE_IOERR_WRITE";
    case SQLITE_IOERR_FSYNC:
      return "SQLITE_IOERR_FSYNC";
    case SQLITE_IOERR_DIR_FSYNC:
      return "SQLITE_IOERR_DIR_FSYNC";
    case SQLITE_IOERR_TRUNCATE:
      return "SQLITE_IOERR_TRUNCATE";
    case SQLITE_IOERR_FSTAT:
      return "SQLITE_IOERR_FSTAT";
    case SQLITE_IOERR_LOCK:
      return "SQLITE_IOERR_LOCK";
    case SQLITE_IOERR_SHMOPEN:
      return "SQLITE_IOERR_SHMOPEN";
    case SQLITE_IOERR_SHMSIZE:
      return "SQLITE_IOERR_SHMSIZE";
    case SQLITE_IOERR_SHMMAP:
      return "SQLITE_IOERR_SHMMAP";
    case SQLITE_FULL:
      return "SQLITE_FULL";
    case SQLITE_CORRUPT:
      return "SQLITE_CORRUPT";
    case SQLITE_NOTADB:
      return "SQLITE_NOTADB";
    case SQLITE_BUSY:
      return "SQLITE_BUSY";
    case SQLITE_CANTOPEN:
      return "SQLITE_CANTOPEN";
    case SQLITE_READONLY:
      return "SQLITE_READONLY";
    case SQLITE_TOOBIG:
      return "SQLITE_TOOBIG";
    default:
      return nullptr;
  }
}

}  // namespace

Status SqliteStatus(sqlite3* db, int rc, std::string_view what) {
  const int primary = rc & 0xFF;
  // sqlite3_errmsg describes the connection's most recent error, which is the
  // one we are reporting; sqlite3_errstr names the code when there is no db.
  std::string message =
      std::string(what) + ": " + (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  const char* name = ExtendedCodeName(rc);
  message += " [" + (name != nullptr ? std::string(name) : "sqlite code " + std::to_string(rc));
  // For I/O errors the OS error is what an operator needs ("File too large").
  const int err = db != nullptr ? sqlite3_system_errno(db) : 0;
  if (err != 0 &&
      (primary == SQLITE_IOERR || primary == SQLITE_FULL || primary == SQLITE_CANTOPEN)) {
    message += ", errno " + std::to_string(err) + ": " + std::strerror(err);
  }
  message += "]";
  switch (primary) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return DataLossError(std::move(message));
    case SQLITE_FULL:
    case SQLITE_TOOBIG:
    case SQLITE_NOMEM:
      return ResourceExhaustedError(std::move(message));
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return UnavailableError(std::move(message));
    default:
      return InternalError(std::move(message));
  }
}

Result<SqliteDb> OpenSqlite(const std::string& path, int flags, std::string_view what) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_EXRESCODE, nullptr);
  SqliteDb db(raw);  // sqlite3_open_v2 may hand back a handle even on failure
  if (rc != SQLITE_OK) {
    return SqliteStatus(db.get(), rc, std::string("cannot open ") + std::string(what));
  }
  sqlite3_extended_result_codes(db.get(), 1);
  return db;
}

Status ExecSql(sqlite3* db, const char* sql, std::string_view what) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteStatus(db, rc, what);
  return Status::Ok();
}

namespace {

// Steps a one-row, one-column query and hands the row to `read`.
template <typename Read>
Status QueryOne(sqlite3* db, const char* sql, std::string_view what, Read read) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  if (rc != SQLITE_OK) return SqliteStatus(db, rc, what);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
  rc = sqlite3_step(raw);
  if (rc != SQLITE_ROW) {
    if (rc == SQLITE_DONE) return InternalError(std::string(what) + ": query returned no row");
    return SqliteStatus(db, rc, what);
  }
  read(raw);
  return Status::Ok();
}

}  // namespace

Result<std::string> QueryText(sqlite3* db, const char* sql, std::string_view what) {
  std::string out;
  DISPATCH_RETURN_IF_ERROR(QueryOne(db, sql, what, [&](sqlite3_stmt* s) {
    const unsigned char* text = sqlite3_column_text(s, 0);
    if (text != nullptr) out = reinterpret_cast<const char*>(text);
  }));
  return out;
}

Result<int64_t> QueryInt(sqlite3* db, const char* sql, std::string_view what) {
  int64_t out = 0;
  DISPATCH_RETURN_IF_ERROR(
      QueryOne(db, sql, what, [&](sqlite3_stmt* s) { out = sqlite3_column_int64(s, 0); }));
  return out;
}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    stmt_ = std::exchange(other.stmt_, nullptr);
  }
  return *this;
}

Result<Statement> Statement::Prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(raw);
    return SqliteStatus(db, rc, std::string("preparing \"") + sql + "\"");
  }
  return Statement(raw);
}

void Statement::BindBlob(int index, std::string_view bytes) {
  // A zero-length blob must still be a blob, not NULL: pass a non-null pointer.
  static const char kEmpty = 0;
  const char* data = bytes.empty() ? &kEmpty : bytes.data();
  sqlite3_bind_blob64(stmt_, index, data, bytes.size(), SQLITE_STATIC);
}

std::string_view Statement::ColumnBlob(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  if (data == nullptr || size <= 0) return {};
  return std::string_view(static_cast<const char*>(data), static_cast<size_t>(size));
}

}  // namespace dispatch::storage
