// ResultStore: where finished closures' results are kept until they are
// released. Small results are rows written in the pass's transaction (many
// share one commit's fsync); results of at least result_file_bytes are
// files of their own, written and fsynced on the thread pool before the
// update finishing their closure is journaled, then adopted here. Reads of
// a reply's or a push's stored results go to the thread pool (ResultReads).
// Released rows leave a slice per commit, and the rest on a timer while
// nothing else commits. A missing, damaged or mismatched stored result is
// DataLoss naming the closure: damaged bytes are never returned.
// REQUIRES: loop thread only.
#pragma once

#include <kj/async.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "reactor/commit_pipeline.h"
#include "reactor/result_reads.h"
#include "reactor/uvkj/repeating_timer.h"
#include "state/dispatcher_state.h"
#include "state/result_bytes.h"
#include "storage/store.h"

namespace dispatch::reactor {

struct ResultStoreOptions {
  // HA mode: the closure results one record finishes take at most this many
  // bytes together (one result alone may take more, up to its own limit),
  // so that a pass's batch fits one etcd transaction. 0: no bound (single
  // node: results go to the local result table).
  size_t result_bytes_per_commit = 0;
  // Closure results of at least this many bytes are kept in files of their
  // own (storage/result_file.h) instead of rows written by the loop's
  // commit (a 32 MiB row held every reply ~150 ms). 0: never (HA mode:
  // results must ride in the replicated journal).
  size_t result_file_bytes = 1u << 20;
};

struct ResultStats {
  uint64_t results_stored = 0;  // closure results stored (rows and files)
  uint64_t result_bytes_stored = 0;
  uint64_t result_files_stored = 0;  // of those, kept in files (result_file_bytes)
  uint64_t results_read = 0;         // stored results read back (fetches)
  uint64_t result_bytes_read = 0;
  uint64_t results_read_off_loop = 0;   // of results_read: read on the thread pool
  uint64_t results_damaged = 0;         // reads refused as missing, damaged or mismatched
  uint64_t unheld_results_dropped = 0;  // rows and files deleted at start-up (see DropUnheld)
};

class ResultStore {
 public:
  // `on_idle`: called when a result read on the pool ended (the owner's
  // stop waiter). `commits_held`: the pipeline's commit gate (no row
  // deletion while it is closed).
  ResultStore(uv_loop_t* loop, storage::Store& store, CommitPipeline& pipeline,
              ResultStoreOptions options, std::function<void()> on_idle,
              std::function<bool()> commits_held);
  ResultStore(const ResultStore&) = delete;
  ResultStore& operator=(const ResultStore&) = delete;

  // Deletes stored results the state does not hold (left by a reset, which
  // forgets closures without releasing them), rows in one transaction, and
  // removes result files no finished closure holds (see result_file.h); the
  // files it keeps become result_files(). Start-up and resets only.
  Status DropUnheld();

  // Stores a closure result in the same transaction as the pass's updates,
  // under the closure's id. REQUIRES: the update finishing the closure with
  // `resultStored` was submitted in this pass.
  void PutResult(uint64_t closure_id, std::string bytes);
  // Deletes a stored result: a row in the same transaction as the pass's
  // updates; a file is only forgotten here and returned, for the caller to
  // remove once the pass is durable (Barrier()): removed before, a crash
  // could restart with the closure still holding a result whose file is gone.
  // REQUIRES: the update releasing the closure was submitted in this pass.
  std::optional<storage::ResultFileId> DeleteResult(uint64_t closure_id);
  // True when a result of `size` bytes is to be kept in a file.
  bool StoresResultInFile(uint64_t size) const {
    return options_.result_file_bytes != 0 && size >= options_.result_file_bytes &&
           options_.result_bytes_per_commit == 0;
  }
  size_t result_bytes_per_commit() const { return options_.result_bytes_per_commit; }
  // Where result files live (the Store's results/).
  std::string result_dir() const { return store_.result_dir(); }
  // Records that `closure_id`'s result is the file written for `attempt`
  // (durable already). REQUIRES: the update finishing the closure with
  // `resultStored` and this size was just submitted, in this pass.
  void AdoptResultFile(uint64_t closure_id, uint32_t attempt, uint64_t size);
  // Results held in files now (closure id -> attempt).
  const std::map<uint64_t, uint32_t>& result_files() const { return result_files_; }
  // The count of file writes running on the thread pool (the closure
  // dispatcher raises it as one starts and lowers it as one ends): a WAL
  // fsync on the loop would queue behind them. Shared, so that it may
  // outlive either side.
  std::shared_ptr<uint64_t> pool_file_writes() const { return pool_file_writes_; }

  // The result of a finished closure: its inline bytes, or the stored ones
  // (this pass's puts first, then the store), checked against the size and
  // CRC32C the state holds.
  Result<std::string> GetResult(const state::Closure& closure);
  // The same, copied straight into `dest`, which has room for exactly
  // ResultSize(closure) bytes (a reply's own buffer: one copy, no string in
  // between). On an error `dest` holds zeros.
  Status ReadResult(const state::Closure& closure, char* dest);
  static uint64_t ResultSize(const state::Closure& closure) {
    return state::ResultBytes(closure);
  }
  // Where a finished closure's result is when reading it is work for the
  // thread pool (ReadStoredResults): a row committed or a file. nullopt when
  // its bytes are at hand on the loop (inline, put in this pass, or empty):
  // ReadResult copies those.
  std::optional<storage::ResultLocation> LocateStoredResult(const state::Closure& closure) const;
  // Reads them on the thread pool, one call's list at a time
  // (reactor/result_reads.h). Rejected once stopped.
  kj::Promise<std::unique_ptr<ResultReads::Done>> ReadStoredResults(
      std::vector<storage::ResultLocation> locations);
  // Counts a read served (ok) or refused (DataLoss); `off_loop`: one of
  // ReadStoredResults.
  void CountResultRead(uint64_t bytes, bool ok, bool off_loop = false);
  // What the status a ReadStoredResults read gave for a result of `size`
  // bytes means, its closure still being held: NotFound is the
  // MissingResultError (held, so not released: lost); one served or found
  // damaged is counted. Replies and input pushes both take it.
  Status HeldResultRead(uint64_t closure_id, uint64_t size, Status read);
  // The DataLoss of a stored result that is not there (`not_found` says
  // where it was looked for) while the state still holds its closure.
  static Status MissingResultError(uint64_t closure_id, const Status& not_found);

  // After a pass's commit: deletes the released rows the commits left on a
  // timer while no commit comes to take them.
  void AfterCommit();
  // Shutdown: waiting reads are rejected, the running one is let finish.
  void Stop();
  bool in_flight() const { return reads_.in_flight(); }
  const ResultStats& stats() const { return stats_; }

 private:
  void OnDeleteTimer();

  storage::Store& store_;
  CommitPipeline& pipeline_;
  const ResultStoreOptions options_;
  const std::function<bool()> commits_held_;
  // Results put in this pass: closure id -> index in the batch's result_puts().
  std::map<uint64_t, size_t> pending_;
  // Results kept in files: closure id -> the attempt that wrote it.
  std::map<uint64_t, uint32_t> result_files_;
  std::shared_ptr<uint64_t> pool_file_writes_ = std::make_shared<uint64_t>(0);
  ResultReads reads_;
  uvkj::UvRepeatingTimer delete_timer_;
  ResultStats stats_;
};

}  // namespace dispatch::reactor
