#include "reactor/result_store.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/rpc_status.h"
#include "storage/result_file.h"

namespace dispatch::reactor {

ResultStore::ResultStore(uv_loop_t* loop, storage::Store& store, CommitPipeline& pipeline,
                         ResultStoreOptions options, std::function<void()> on_idle,
                         std::function<bool()> commits_held)
    : store_(store),
      pipeline_(pipeline),
      options_(options),
      commits_held_(std::move(commits_held)),
      reads_(loop, store.db_path(), store.result_dir(), std::move(on_idle)),
      delete_timer_(loop, 1, [this]() { OnDeleteTimer(); }) {
  // Leftovers are the next start's, not a reason for the loop to run.
  delete_timer_.Unref();
  // What this pass put is readable from the store once committed; at
  // fail-stop it is gone.
  pipeline_.AddBatchListener([this]() { pending_.clear(); });
}

void ResultStore::PutResult(uint64_t closure_id, std::string bytes) {
  ++stats_.results_stored;
  stats_.result_bytes_stored += bytes.size();
  JournalBatch& batch = pipeline_.batch();
  pending_[closure_id] = batch.result_puts().size();
  batch.PutResult(closure_id, std::move(bytes));
}

std::optional<storage::ResultFileId> ResultStore::DeleteResult(uint64_t closure_id) {
  auto file = result_files_.find(closure_id);
  if (file != result_files_.end()) {
    storage::ResultFileId id{closure_id, file->second};
    result_files_.erase(file);
    return id;
  }
  pending_.erase(closure_id);
  pipeline_.batch().DeleteResult(closure_id);
  return std::nullopt;
}

void ResultStore::AdoptResultFile(uint64_t closure_id, uint32_t attempt, uint64_t size) {
  ++stats_.results_stored;
  ++stats_.result_files_stored;
  stats_.result_bytes_stored += size;
  result_files_[closure_id] = attempt;
}

Result<std::string> ResultStore::GetResult(const state::Closure& closure) {
  std::string bytes(ResultSize(closure), '\0');
  DISPATCH_RETURN_IF_ERROR(ReadResult(closure, bytes.data()));
  return bytes;
}

Status ResultStore::ReadResult(const state::Closure& closure, char* dest) {
  const uint64_t size = ResultSize(closure);
  std::optional<storage::ResultLocation> location = LocateStoredResult(closure);
  if (!location.has_value()) {
    if (!closure.result_stored) {
      std::memcpy(dest, closure.result.data(), size);
      return Status::Ok();
    }
    if (size == 0) return Status::Ok();  // empty results have no row
    const std::string& bytes = pipeline_.batch().result_puts()[pending_.at(closure.id)].bytes;
    if (bytes.size() != size) {
      return InternalError("the result of closure " + std::to_string(closure.id) +
                           " put in this pass has another size than its record");
    }
    std::memcpy(dest, bytes.data(), size);
    CountResultRead(size, true);
    return Status::Ok();
  }
  Status status = store_.ReadResultAt(*location, dest);
  if (status.code() == StatusCode::kNotFound) status = MissingResultError(closure.id, status);
  CountResultRead(size, status.ok());
  return status;
}

std::optional<storage::ResultLocation> ResultStore::LocateStoredResult(
    const state::Closure& closure) const {
  if (!closure.result_stored || closure.result_size == 0) return std::nullopt;
  storage::ResultLocation location;
  location.closure_id = closure.id;
  location.size = closure.result_size;
  location.crc = closure.result_crc;
  auto file = result_files_.find(closure.id);
  if (file != result_files_.end()) {
    location.in_file = true;
    location.file_attempt = file->second;
  } else if (pending_.contains(closure.id)) {
    return std::nullopt;  // in this pass's batch, not committed yet
  }
  return location;
}

Status ResultStore::MissingResultError(uint64_t closure_id, const Status& not_found) {
  return DataLossError("the result of closure " + std::to_string(closure_id) + " is missing (" +
                       not_found.message() + ") although the journal says it is stored");
}

kj::Promise<std::unique_ptr<ResultReads::Done>> ResultStore::ReadStoredResults(
    std::vector<storage::ResultLocation> locations) {
  return reads_.Read(std::move(locations));
}

Status ResultStore::HeldResultRead(uint64_t closure_id, uint64_t size, Status read) {
  if (read.code() == StatusCode::kNotFound) read = MissingResultError(closure_id, read);
  if (read.ok() || read.code() == StatusCode::kDataLoss) {
    CountResultRead(size, read.ok(), /*off_loop=*/true);
  }
  return read;
}

void ResultStore::CountResultRead(uint64_t bytes, bool ok, bool off_loop) {
  if (!ok) {
    ++stats_.results_damaged;
    return;
  }
  ++stats_.results_read;
  if (off_loop) ++stats_.results_read_off_loop;
  stats_.result_bytes_read += bytes;
}

Status ResultStore::DropUnheld() {
  const state::DispatcherState& state = pipeline_.state();
  JournalBatch batch;
  auto ids = store_.ListResults();
  if (!ids.ok()) return ids.status();
  auto holds = [&](uint64_t id) {
    const state::Closure* closure = state.FindClosure(id);
    return closure != nullptr && closure->result_stored && closure->result_size > 0;
  };
  for (uint64_t id : *ids) {
    if (holds(id)) continue;
    batch.DeleteResult(id);
    ++stats_.unheld_results_dropped;
  }
  // A file is held when its closure finished in the attempt that wrote it
  // and no row holds the result instead; the others are removed at once
  // (no transaction names them).
  auto listing = storage::ListResultFiles(result_dir());
  if (!listing.ok()) return listing.status();
  result_files_.clear();
  std::vector<storage::ResultFileId> unheld;
  for (const storage::ResultFileId& file : listing->files) {
    const state::Closure* closure = state.FindClosure(file.closure_id);
    if (holds(file.closure_id) && closure->attempts == file.attempt &&
        !std::binary_search(ids->begin(), ids->end(), file.closure_id)) {
      result_files_[file.closure_id] = file.attempt;
    } else {
      unheld.push_back(file);
    }
  }
  if (!unheld.empty()) {
    // The state just replayed may hold records that are only in the page
    // cache (a kill -9 before their fsync): a release among them must be
    // durable before its file goes, or a power cut now would bring the
    // closure back without its result.
    auto syncer = store_.NewWalSyncer();
    if (!syncer.ok()) return syncer.status();
    DISPATCH_RETURN_IF_ERROR((*syncer)->Sync());
  }
  for (const storage::ResultFileId& file : unheld) {
    // One that cannot be removed is only disk space: it is never read.
    Status removed = storage::RemoveResultFile(result_dir(), file);
    if (!removed.ok()) Log(LogLevel::kWarning, removed.ToString().c_str());
    ++stats_.unheld_results_dropped;
  }
  if (batch.empty()) return Status::Ok();
  return store_.Commit(batch).status();
}

void ResultStore::AfterCommit() {
  if (store_.HasRowsToDelete()) delete_timer_.Start();
}

void ResultStore::Stop() { reads_.Stop(); }

void ResultStore::OnDeleteTimer() {
  if (pipeline_.failed() || !store_.HasRowsToDelete()) {
    delete_timer_.Stop();
    return;
  }
  // This pass's commit takes a slice itself; a checkpoint may want nothing
  // written meanwhile.
  if (pipeline_.pending() || commits_held_()) return;
  Status status = store_.DeleteReleasedRows();
  if (!status.ok()) {
    pipeline_.FailStop(status);
    return;
  }
  if (!store_.HasRowsToDelete()) delete_timer_.Stop();
}

}  // namespace dispatch::reactor
