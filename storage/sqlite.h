// RAII for SQLite: a connection (SqliteDb) and a prepared statement
// (Statement), plus the one place that turns a SQLite result code into a
// Status whose message names what was being done. A Statement must be
// destroyed before its connection; both are move-only and owned by one thread.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dispatch::storage {

struct SqliteCloser {
  // sqlite3_close_v2 never fails for a busy connection; it closes once the
  // last statement is finalized, so member order mistakes cannot leak it.
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using SqliteDb = std::unique_ptr<sqlite3, SqliteCloser>;

// Maps a SQLite result code to a Status: CORRUPT/NOTADB -> DataLoss,
// FULL -> ResourceExhausted, IOERR/CANTOPEN/BUSY/LOCKED -> Unavailable,
// TOOBIG -> ResourceExhausted, anything else -> Internal. The message is
// "<what>: <sqlite message> [<code name>, errno N: <strerror>]" (errno for I/O).
Status SqliteStatus(sqlite3* db, int rc, std::string_view what);

// Opens `path` with `flags` (SQLITE_OPEN_* ; extended result codes are always
// enabled). `what` names the database in errors.
Result<SqliteDb> OpenSqlite(const std::string& path, int flags, std::string_view what);

// Runs SQL that returns no rows we need (pragmas, DDL, BEGIN/COMMIT).
Status ExecSql(sqlite3* db, const char* sql, std::string_view what);

// Runs a statement that yields one row with one column and returns it as
// text (for pragmas such as journal_mode) or as an integer.
Result<std::string> QueryText(sqlite3* db, const char* sql, std::string_view what);
Result<int64_t> QueryInt(sqlite3* db, const char* sql, std::string_view what);

// A prepared statement, prepared once and reused: Step() until it returns
// SQLITE_DONE, then Reset(). Blobs and text are bound SQLITE_STATIC: the
// caller keeps them alive until the statement is Reset().
class Statement {
 public:
  Statement() = default;
  Statement(Statement&& other) noexcept : stmt_(other.stmt_) { other.stmt_ = nullptr; }
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  // Prepares `sql` (SQLITE_PREPARE_PERSISTENT: it lives as long as the Store).
  static Result<Statement> Prepare(sqlite3* db, const char* sql);

  // Binding never fails for valid indices and sizes below SQLITE_LIMIT_LENGTH,
  // which the Store checks first; a failure still surfaces at Step().
  void BindInt(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }
  void BindBlob(int index, std::string_view bytes);

  // SQLITE_ROW, SQLITE_DONE, or an error code.
  int Step() { return sqlite3_step(stmt_); }
  // Releases the statement's read/write cursor; call after every use.
  void Reset() { sqlite3_reset(stmt_); }

  int64_t ColumnInt(int column) const { return sqlite3_column_int64(stmt_, column); }
  bool ColumnIsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  // Valid until the next Step() or Reset(); not aligned.
  std::string_view ColumnBlob(int column) const;

  sqlite3_stmt* get() const { return stmt_; }

 private:
  explicit Statement(sqlite3_stmt* stmt) : stmt_(stmt) {}
  sqlite3_stmt* stmt_ = nullptr;
};

// Resets a statement when it leaves scope, so an early return cannot leave a
// read transaction open.
class ScopedReset {
 public:
  explicit ScopedReset(Statement& stmt) : stmt_(stmt) {}
  ScopedReset(const ScopedReset&) = delete;
  ScopedReset& operator=(const ScopedReset&) = delete;
  ~ScopedReset() { stmt_.Reset(); }

 private:
  Statement& stmt_;
};

}  // namespace dispatch::storage
