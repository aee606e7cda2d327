// Reading stored closure results back: rows of the result table and result
// files (result_file.h), each checked against the size and CRC32C the
// journal recorded for it. Two callers share the code here:
//  - the Store reads a row or a file through its own (the loop's)
//    connection, for the small reads the loop does itself
//    (Store::ReadResultAt, Store::GetResult);
//  - a ResultReader reads rows through its OWN read-only connection (no
//    mutex, nothing shared with the Store) and files with pread, on a
//    thread of the pool, so that a reply carrying megabytes of results
//    never holds the loop (reactor/result_reads.h).
// Threading contract of a ResultReader, as for the TablesReader: made on
// the loop thread, used by one thread at a time, destroyed before the Store.
// It holds no read transaction between calls (a held one would keep the
// WAL from restarting).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "storage/sqlite.h"

namespace dispatch::storage {

// Where a stored result is and what the journal recorded of it.
struct ResultLocation {
  uint64_t closure_id = 0;
  uint64_t size = 0;
  uint32_t crc = 0;           // CRC32C of the bytes
  bool in_file = false;       // a result file; else a row of the result table
  uint32_t file_attempt = 0;  // in_file: the attempt its file is named after
};

// Reads the row of `closure_id` straight into `dest` (room for exactly
// `size` bytes) through `db`, where `get_result` is its prepared
// "SELECT crc, length(body) FROM result WHERE closure = ?1". NotFound when
// there is no row; DataLoss when its size or its row checksum disagrees.
// On an error `dest` holds zeros.
Status ReadResultRow(sqlite3* db, Statement& get_result, const std::string& db_path,
                     uint64_t closure_id, char* dest, size_t size);

// Reads the result at `location` into `dest` (room for location.size bytes):
// its file under `result_dir`, or its row through `db` and `get_result` (as
// for ReadResultRow), then checks it against location.crc. NotFound when its
// row or file is not there (released since it was located, or lost: the
// caller knows which); DataLoss naming the row or file when it is damaged,
// and then `dest` holds zeros. Both connections read through this.
Status ReadResultAt(sqlite3* db, Statement& get_result, const std::string& db_path,
                    const std::string& result_dir, const ResultLocation& location, char* dest);

class ResultReader {
 public:
  // Opens a read-only connection to `db_path` (which the Store has open in
  // WAL mode); files are read from `result_dir`.
  static Result<std::unique_ptr<ResultReader>> Open(const std::string& db_path,
                                                    std::string result_dir);
  ResultReader(const ResultReader&) = delete;
  ResultReader& operator=(const ResultReader&) = delete;

  // ReadResultAt through this connection, a row inside a read transaction.
  Status Read(const ResultLocation& location, char* dest);

 private:
  ResultReader(std::string db_path, std::string result_dir, SqliteDb db, Statement get_result)
      : db_path_(std::move(db_path)),
        result_dir_(std::move(result_dir)),
        db_(std::move(db)),
        get_result_(std::move(get_result)) {}

  std::string db_path_;
  std::string result_dir_;
  SqliteDb db_;
  Statement get_result_;
};

}  // namespace dispatch::storage
