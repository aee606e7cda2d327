// OffLoop: runs a function that returns a string (a serializer working on a
// copy it owns) on libuv's thread pool and resolves a promise with the string
// on the loop thread, so bulk formatting never holds the loop (DESIGN.md,
// principle 8), or does file work that must not block it (result files,
// ClosureDispatcher). What the function captures must be its own: nothing it
// touches may be shared with the loop; an exception it throws rejects the
// promise with its what() as the description. Jobs in flight are bounded by
// their callers (one per open HTTP connection: --http-max-connections; one
// per closure whose result file is written, and the removals of a release).
// Destroying the runner gives up the jobs in flight: their promises are
// rejected, and a job already running is freed where libuv hands it back.
// REQUIRES: loop thread, except the functions themselves.
#pragma once

#include <kj/async.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "reactor/uvkj/pool_work.h"

namespace dispatch::reactor {

class OffLoop {
 public:
  explicit OffLoop(uv_loop_t* loop) : loop_(loop) {}
  ~OffLoop();
  OffLoop(const OffLoop&) = delete;
  OffLoop& operator=(const OffLoop&) = delete;

  // `work` runs on a pool thread; an exception it throws rejects the promise.
  kj::Promise<std::string> Run(std::function<std::string()> work);

  uint64_t jobs_run() const { return jobs_run_; }
  size_t in_flight() const { return pending_.size(); }

 private:
  struct Job final : public uvkj::PoolJob {
    void Run() override;
    std::function<std::string()> work;
    std::string result;
    std::string error;  // non-empty: `work` threw this
  };
  struct Pending {
    std::unique_ptr<uvkj::PoolWork<Job>> work;
    kj::Own<kj::PromiseFulfiller<std::string>> fulfiller;
  };

  uv_loop_t* const loop_;
  uint64_t next_id_ = 0;
  uint64_t jobs_run_ = 0;
  std::map<uint64_t, Pending> pending_;
};

}  // namespace dispatch::reactor
