// ResultReads: the stored results of a reply, read on libuv's thread pool
// (storage::ResultReader: rows through a read-only connection of its own,
// files with pread, each checked against the CRC32C the journal recorded),
// so that a reply of many megabytes never holds the loop: the loop only
// copies the bytes into it (reactor/outcome_reply.h). Measured before: a
// 16 MiB awaitResults reply of rows held the loop for up to ~100 ms.
// One read runs at a time and the others wait their turn, in order: one
// reply's bytes are in memory at a time, and of the pool's threads this
// takes one (the WAL fsync every reply waits for must find one free).
// The connection is opened by the first read, on the pool thread, and is
// owned by the job while it runs.
// Shutdown: Stop() rejects the waiting reads and says when the running one
// is back (DurableState::StopBackgroundWork), so that the connection closes
// before the Store does (storage/result_reader.h).
// REQUIRES: loop thread.
#pragma once

#include <kj/async.h>
#include <uv.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "reactor/uvkj/pool_work.h"
#include "storage/result_reader.h"

namespace dispatch::reactor {

// Stored results of one reply or push below this many bytes in all are read
// on the loop: the rows of small results cost microseconds, less than a hop
// to the pool and back.
inline constexpr uint64_t kOffLoopReadBytes = 64u << 10;

class ResultReads {
 public:
  // What a read brought back: item i's bytes are bytes[offsets[i], +size)
  // when statuses[i] is ok (see storage::ResultReader::Read for the rest).
  struct Done {
    std::string bytes;
    std::vector<size_t> offsets;
    std::vector<Status> statuses;
  };

  // `on_idle` runs each time a read comes back with none waiting.
  ResultReads(uv_loop_t* loop, std::string db_path, std::string result_dir,
              std::function<void()> on_idle);
  ~ResultReads();
  ResultReads(const ResultReads&) = delete;
  ResultReads& operator=(const ResultReads&) = delete;

  // Reads `items` on the pool, after the reads asked before. Rejected
  // (Unavailable) once stopped; a dropped promise's read still runs.
  kj::Promise<std::unique_ptr<Done>> Read(std::vector<storage::ResultLocation> items);
  // No more reads: the waiting ones are rejected; the running one finishes.
  void Stop();
  bool in_flight() const { return work_.in_flight(); }
  uint64_t reads_run() const { return reads_run_; }

 private:
  struct Job;
  struct Waiting {
    std::vector<storage::ResultLocation> items;
    kj::Own<kj::PromiseFulfiller<std::unique_ptr<Done>>> fulfiller;
  };
  void StartNext();
  void OnDone(std::unique_ptr<Job> job);

  uv_loop_t* const loop_;
  const std::string db_path_;
  const std::string result_dir_;
  std::function<void()> on_idle_;
  bool stopped_ = false;
  uint64_t reads_run_ = 0;
  std::deque<Waiting> waiting_;
  // Owned here while idle, by the job while it runs; null until the first read opens it.
  std::unique_ptr<storage::ResultReader> reader_;
  kj::Own<kj::PromiseFulfiller<std::unique_ptr<Done>>> running_;
  uvkj::PoolWork<Job> work_{loop_};
};

}  // namespace dispatch::reactor
