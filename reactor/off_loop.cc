#include "reactor/off_loop.h"

#include <kj/debug.h>

#include <exception>

namespace dispatch::reactor {

void OffLoop::Job::Run() {
  try {
    result = work();
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown exception";
  }
  work = nullptr;  // what it captured is freed on this thread, not the loop's
}

OffLoop::~OffLoop() {
  for (auto& [id, pending] : pending_) {
    pending.work->Abandon();
    pending.fulfiller->reject(KJ_EXCEPTION(DISCONNECTED, "shutting down"));
  }
}

kj::Promise<std::string> OffLoop::Run(std::function<std::string()> work) {
  auto job = std::make_unique<Job>();
  job->work = std::move(work);
  auto paf = kj::newPromiseAndFulfiller<std::string>();
  const uint64_t id = next_id_++;
  Pending& pending = pending_[id];
  pending.work = std::make_unique<uvkj::PoolWork<Job>>(loop_);
  pending.fulfiller = kj::mv(paf.fulfiller);
  int rc = pending.work->Start(job, [this, id](std::unique_ptr<Job> done) {
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    ++jobs_run_;
    if (done->error.empty()) {
      it->second.fulfiller->fulfill(std::move(done->result));
    } else {
      // The job's own words: callers show them (a file that could not be written).
      it->second.fulfiller->reject(kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                                                 kj::str(done->error)));
    }
    pending_.erase(it);  // PoolWork touches nothing of its own after `done`
  });
  if (rc < 0) {
    pending_.erase(id);
    return KJ_EXCEPTION(FAILED, "cannot queue work on the thread pool", uv_strerror(rc));
  }
  return kj::mv(paf.promise);
}

}  // namespace dispatch::reactor
