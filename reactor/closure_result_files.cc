// ClosureDispatcher: results of --result-file-bytes or more, kept in files
// (storage/result_file.h). A report's bytes are copied and written on the
// thread pool, one write at a time, in order; back on the loop the finish is
// submitted if the closure still runs as that attempt, else the file goes.
// Files of released closures are removed once the release is durable.

#include <kj/debug.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/rpc_status.h"
#include "reactor/closure_dispatcher.h"

namespace dispatch::reactor {

kj::Promise<bool> ClosureDispatcher::StoreResultFile(state::ClosureRun run,
                                                     capnp::Data::Reader bytes) {
  // The job owns a copy: a cancelled call frees its message while the job
  // may still be writing from it. The copy's buffer comes back for reuse
  // once the job is over (it drops its reference on the pool thread, before
  // the loop hears of it).
  std::shared_ptr<std::string> copy = copy_buffers_.Copy(
      std::string_view(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
  const uint64_t size = bytes.size();
  writing_results_.insert({run.closure_id, run.attempt});
  kj::Promise<std::string> written =
      RunFileWrite([dir = durable_.results().result_dir(), run, copy]() -> std::string {
        Result<uint32_t> crc = storage::WriteResultFile(dir, run.closure_id, run.attempt, *copy);
        if (!crc.ok()) throw std::runtime_error(crc.status().ToString());
        return std::to_string(*crc);
      });
  // Either way the write ended, its buffer comes back here: the job's
  // reference is gone by then, so this one is the last.
  struct Written {
    std::optional<uint32_t> crc;  // nullopt: failed with `error`
    std::string error;
  };
  kj::Promise<bool> adopted =
      written
          .then([](std::string crc) { return Written{static_cast<uint32_t>(std::stoul(crc)), {}}; },
                [](kj::Exception&& e) {
                  return Written{std::nullopt, e.getDescription().cStr()};
                })
          .then([this, run, size, copy = std::move(copy)](Written written) mutable {
            if (copy.use_count() == 1) {
              copy_buffers_.GiveBack(std::make_unique<std::string>(std::move(*copy)));
            }
            copy.reset();
            if (!written.crc.has_value()) return OnResultFileFailed(run, size, written.error);
            return OnResultFileWritten(run, size, *written.crc);
          });
  // The write is finished on the loop (adopted, or its file removed) even
  // when the report's call goes away meanwhile (its worker disconnected): a
  // task of ours owns it, and the call only waits for it. The run is fenced
  // until then, however it ends (the dispatcher closed: the task is dropped).
  auto finished =
      adopted
          .attach(kj::defer([self = kj::addRef(*this), key = std::make_pair(run.closure_id, run.attempt)]() mutable {
            self->writing_results_.erase(key);
          }))
          .fork();
  AddTask(finished.addBranch().ignoreResult());
  return CancelOnClose(finished.addBranch());
}

kj::Promise<std::string> ClosureDispatcher::RunFileWrite(std::function<std::string()> work) {
  auto paf = kj::newPromiseAndFulfiller<std::string>();
  file_writes_queued_.push_back({std::move(work), kj::mv(paf.fulfiller)});
  StartFileWrites();
  return kj::mv(paf.promise);
}

void ClosureDispatcher::StartFileWrites() {
  while (file_writes_running_ < kMaxFileWrites && !file_writes_queued_.empty() && !closed_) {
    QueuedFileWrite next = std::move(file_writes_queued_.front());
    file_writes_queued_.pop_front();
    if (!next.fulfiller->isWaiting()) continue;  // its call went away meanwhile
    ++file_writes_running_;
    ++*durable_file_writes_;
    auto fulfiller = std::make_shared<kj::Own<kj::PromiseFulfiller<std::string>>>(kj::mv(next.fulfiller));
    AddTask(result_files_.Run(std::move(next.work))
                .then([fulfiller](std::string crc) { (*fulfiller)->fulfill(kj::mv(crc)); },
                      [fulfiller](kj::Exception&& e) { (*fulfiller)->reject(kj::mv(e)); })
                .attach(kj::defer([this]() {
                  --file_writes_running_;
                  --*durable_file_writes_;
                  if (!closed_) StartFileWrites();
                })));
  }
}

bool ClosureDispatcher::OnResultFileWritten(const state::ClosureRun& run, uint64_t size, uint32_t crc) {
  const storage::ResultFileId file{run.closure_id, run.attempt};
  if (state().FindRunning(run.closure_id, run.worker_id, run.attempt) == nullptr) {
    // It ended while its result was written (cancelled, timed out, its
    // worker lost): nothing journaled names the file.
    ++counters_.reports_ignored;
    RemoveResultFiles({file}, /*when_durable=*/false);
    return true;
  }
  Status status = Finish({state::StoredResult{run, size, crc}},
                         [&](size_t) { durable_.results().AdoptResultFile(run.closure_id, run.attempt, size); });
  if (!status.ok()) {
    if (durable_.state().FindRunning(run.closure_id, run.worker_id, run.attempt) != nullptr) {
      RemoveResultFiles({file}, /*when_durable=*/false);
    }
    ThrowStatus(status);
  }
  Kick();  // its slot is free
  return false;
}

bool ClosureDispatcher::OnResultFileFailed(const state::ClosureRun& run, uint64_t size,
                                           const std::string& error) {
  Log(LogLevel::kError, "cannot store the result of closure ", run.closure_id, " (", size,
      " bytes): ", error.c_str());
  if (state().FindRunning(run.closure_id, run.worker_id, run.attempt) == nullptr) {
    ++counters_.reports_ignored;
    return true;
  }
  // The disk refused the file, not the journal: the run ends as a transient
  // error (retried like one), and the dispatcher goes on serving.
  Status status = Carry(state::PlanRunEnded(
      state(), options_.policy, run, state::RunEnd::kTransientError,
      "its result of " + std::to_string(size) + " bytes could not be stored: " + error, Stamp()));
  if (!status.ok()) ThrowStatus(status);
  Kick();
  return false;
}

void ClosureDispatcher::RemoveResultFiles(std::vector<storage::ResultFileId> files, bool when_durable) {
  // Closed: the next start removes the files no closure holds.
  if (files.empty() || closed_) return;
  // With --synchronous=normal, Barrier() waits for the commit, not for an
  // fsync: the job syncs the WAL itself first, so that a power cut cannot
  // bring back a released closure whose file is gone.
  std::shared_ptr<storage::WalSyncer> syncer;
  if (when_durable && durable_.store().options().synchronous == storage::Synchronous::kNormal) {
    auto opened = durable_.store().NewWalSyncer();
    if (!opened.ok()) {
      Log(LogLevel::kWarning, "keeping released result files: ", opened.status().ToString().c_str());
      return;  // the next start removes them, after a sync
    }
    syncer = std::move(opened).value();
  }
  auto remove = [this, files = kj::mv(files), syncer]() mutable {
    return result_files_
        .Run([dir = durable_.results().result_dir(), files, syncer]() -> std::string {
          if (syncer != nullptr) {
            Status synced = syncer->Sync();
            if (!synced.ok()) throw std::runtime_error("keeping released result files: " + synced.ToString());
          }
          std::string errors;
          for (const storage::ResultFileId& file : files) {
            Status removed = storage::RemoveResultFile(dir, file);
            if (!removed.ok()) errors += (errors.empty() ? "" : "; ") + removed.ToString();
          }
          if (!errors.empty()) throw std::runtime_error(errors);
          return std::string();
        })
        .ignoreResult();
  };
  if (!when_durable) {
    AddTask(remove());
    return;
  }
  AddTask(durable_.pipeline().Barrier().then(kj::mv(remove)));
}

}  // namespace dispatch::reactor
