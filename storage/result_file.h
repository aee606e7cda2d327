// Result files: a closure result of at least DurableStateOptions::
// result_file_bytes is kept in a file of its own under <work dir>/results/
// instead of a row of the result table, so that storing, reading and
// deleting it never runs through the loop thread's SQLite transaction (a
// 32 MiB row is 8,192 WAL frames: ~150 ms on the loop per result, measured).
// The protocol (the reactor's ClosureDispatcher):
//   1. On the thread pool: WriteResultFile writes the file under the
//      closure's id and the attempt that produced it, fsyncs it and the
//      directory, and returns the bytes' CRC32C.
//   2. On the loop thread, only then: the update finishing the closure (size
//      and CRC32C, `resultStored`) is submitted and journaled as usual. So a
//      journaled finish always names a durable file.
//   3. Releasing the closure journals the release; once that is durable the
//      file is removed.
// A crash between 1 and 2, or between 3 and the removal, leaves a file no
// finished closure holds: start-up removes those (DurableState). The file
// name carries the attempt, so a late write of an earlier attempt never
// touches the file of the attempt that finished.
// These functions touch no SQLite, no libuv and no logger: any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace dispatch::storage {

// The directory inside the work dir; the Store creates it at Open.
inline constexpr char kResultDirName[] = "results";

// Magic, closure id, attempt, size, CRC32C of the body, and a CRC32C of those.
inline constexpr size_t kResultFileHeaderBytes = 40;

// "<closure id, 20 digits>-<attempt, 10 digits>.result".
std::string ResultFileName(uint64_t closure_id, uint32_t attempt);

struct ResultFileId {
  uint64_t closure_id = 0;
  uint32_t attempt = 0;
  bool operator==(const ResultFileId&) const = default;
};

// The id a name made by ResultFileName holds; false for any other name.
bool ParseResultFileName(std::string_view name, ResultFileId* id);

// Writes `body` as the result of `closure_id`'s attempt `attempt` into `dir`,
// replacing a file of that name, then fsyncs the file and `dir`. Returns the
// body's CRC32C. Unavailable naming the file on any I/O error (the partial
// file is removed, best effort).
Result<uint32_t> WriteResultFile(const std::string& dir, uint64_t closure_id, uint32_t attempt,
                                 std::string_view body);

// Reads the body of `closure_id`'s attempt `attempt` straight into `dest`,
// which has room for exactly `size` bytes. NotFound when there is no such
// file; DataLoss naming the file when its header is damaged or disagrees
// (closure, attempt, size), or the file is shorter or longer than its header
// says. The body is NOT checked against its CRC32C here: the caller compares
// it with the CRC32C the journal recorded (one pass over the bytes).
Status ReadResultFile(const std::string& dir, uint64_t closure_id, uint32_t attempt, char* dest,
                      size_t size);

// Reads the whole file of `id` in `dir` and checks its header and its body's
// CRC32C (dispatcher --verify). Returns the body's size; DataLoss naming the
// file when anything disagrees.
Result<uint64_t> CheckResultFile(const std::string& dir, const ResultFileId& id);

// Removes the file; a missing one is fine. Unavailable on another error.
Status RemoveResultFile(const std::string& dir, const ResultFileId& id);

// Every result file in `dir` (a missing dir: none), and separately the names
// of anything else in it (left there by something else; never removed).
struct ResultDirListing {
  std::vector<ResultFileId> files;
  std::vector<std::string> others;
};
Result<ResultDirListing> ListResultFiles(const std::string& dir);

}  // namespace dispatch::storage
