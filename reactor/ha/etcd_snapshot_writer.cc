#include "reactor/ha/etcd_snapshot_writer.h"

#include <signal.h>
#include <uv.h>

#include <kj/debug.h>

#include "common/log.h"
#include "reactor/ha/wire/journal_group_codec.h"
#include "storage/snapshot_file.h"

namespace dispatch::ha {

// Off the loop: the snapshot file's body and the pinned tables, encoded as
// one image and cut into chunk values. Owns all it touches.
struct EtcdSnapshotWriter::BuildJob : uvkj::PoolJob {
  std::string work_dir;
  storage::SnapshotFileInfo info;
  std::unique_ptr<storage::TablesReader> reader;
  size_t chunk_bytes = 0;
  Status status;
  SnapshotChunks chunks;
  uint64_t datasets = 0;
  uint64_t results = 0;

  void Run() override {
    auto body = storage::ReadSnapshotFile(work_dir, info);
    if (!body.ok()) {
      status = body.status();
      return;
    }
    JournalBatch tables;
    status = reader->ReadAll(&tables);
    reader.reset();
    if (!status.ok()) return;
    datasets = tables.dataset_puts().size();
    results = tables.result_puts().size();
    auto image = EncodeSnapshotImage(info.seq, *body, tables);
    if (!image.ok()) {
      status = image.status();
      return;
    }
    chunks = CutSnapshot(info.seq, *image, chunk_bytes);
  }
};

EtcdSnapshotWriter::EtcdSnapshotWriter(uvkj::UvAsyncIo& io, etcd::EtcdClient& client, EtcdJournal& journal,
                                       storage::Store& store, EtcdSnapshotWriterOptions options,
                                       std::function<void(const Status&)> on_failure)
    : io_(io),
      client_(client),
      journal_(journal),
      store_(store),
      options_(std::move(options)),
      on_failure_(std::move(on_failure)),
      stats_(journal.mutable_stats()),
      leader_key_(options_.prefix + "/leader"),
      build_(io.loop()) {}

EtcdSnapshotWriter::~EtcdSnapshotWriter() noexcept(false) = default;

void EtcdSnapshotWriter::Started(uint64_t seq) {
  if (failed_ || journal_.failed()) return;
  if (next_.has_value()) ++stats_.snapshots_skipped;  // a newer one replaces it
  next_.reset();
  auto reader = store_.NewTablesReader();
  Result<uint64_t> pinned = reader.ok() ? (*reader)->Pin() : Result<uint64_t>(reader.status());
  if (!pinned.ok() || *pinned != seq) {
    ++stats_.snapshot_failures;
    Log(LogLevel::kWarning, "etcd snapshot at record ", seq, " not started: ",
        pinned.ok() ? ("the tables reader sees record " + std::to_string(*pinned)).c_str()
                    : pinned.status().ToString().c_str());
    return;
  }
  Pinned next;
  next.seq = seq;
  next.reader = std::move(reader).value();
  next_ = std::move(next);
}

void EtcdSnapshotWriter::Ended(uint64_t seq, const storage::SnapshotFileInfo* recorded) {
  if (!next_.has_value() || next_->seq != seq || next_->recorded.has_value()) return;
  if (recorded == nullptr || recorded->seq != seq) {
    next_.reset();  // the local snapshot failed: nothing to send
    return;
  }
  next_->recorded = *recorded;
  MaybeStart();
}

void EtcdSnapshotWriter::MaybeStart() {
  if (busy_ || failed_ || !next_.has_value() || !next_->recorded.has_value()) return;
  if (journal_.failed()) return;
  Pinned pinned = std::move(*next_);
  next_.reset();
  busy_ = true;
  ++attempts_;
  seq_ = pinned.seq;
  started_ns_ = uv_hrtime();
  auto job = std::make_unique<BuildJob>();
  job->work_dir = store_.work_dir();
  job->info = *pinned.recorded;
  job->reader = std::move(pinned.reader);
  job->chunk_bytes = options_.chunk_bytes;
  if (build_.Start(job, [this](std::unique_ptr<BuildJob> done) { OnBuilt(std::move(done)); }) != 0) {
    GiveUp(UnavailableError("cannot queue the etcd snapshot's encoding on the thread pool"));
  }
}

void EtcdSnapshotWriter::OnBuilt(std::unique_ptr<BuildJob> job) {
  if (failed_) return;
  if (!job->status.ok()) {
    GiveUp(job->status);
    return;
  }
  chunks_ = std::move(job->chunks);
  Log(LogLevel::kInfo, "etcd snapshot at record ", chunks_.descriptor.seq, ": ", chunks_.descriptor.bytes,
      " bytes (", job->datasets, " dataset definitions, ", job->results, " closure results) in ",
      chunks_.descriptor.chunks, " chunks");
  step_ = Step::kClear;
  chunk_ = 0;
  tasks_.add(Send());
}

kj::Promise<void> EtcdSnapshotWriter::Send() {
  if (failed_ || journal_.failed()) return kj::READY_NOW;
  const uint64_t seq = chunks_.descriptor.seq;
  etcd::Txn txn;
  txn.compare.push_back(etcd::Compare::CreateRevisionIs(leader_key_, options_.leader_revision));
  txn.failure.push_back(etcd::Op::Get(leader_key_));
  switch (step_) {
    case Step::kClear: {
      const std::string prefix = SnapshotChunkPrefix(options_.prefix, seq);
      txn.success.push_back(etcd::Op::Delete(prefix, etcd::PrefixEnd(prefix)));
      break;
    }
    case Step::kChunk:
      txn.success.push_back(etcd::Op::Put(SnapshotChunkKey(options_.prefix, seq, chunk_), chunks_.values[chunk_]));
      break;
    case Step::kSwitch:
      return SendSwitch();
  }
  return client_.Commit(txn).then([this](Result<etcd::TxnResult> result) { OnAnswer(std::move(result)); });
}

kj::Promise<void> EtcdSnapshotWriter::SendSwitch() {
  const uint64_t seq = chunks_.descriptor.seq;
  if (journal_.acknowledged_seq() < seq) {
    if (journal_.idle()) {
      GiveUp(InternalError("BUG: the etcd journal is idle but acknowledged only record " +
                           std::to_string(journal_.acknowledged_seq())));
      return kj::READY_NOW;
    }
    // The switch deletes the journal up to S: not before etcd holds it.
    return journal_.WhenAcknowledged(seq).then(
        [this]() { return Send(); },
        [](kj::Exception&&) -> kj::Promise<void> {
          return kj::READY_NOW;  // the journal failed: it stops the process itself
        });
  }
  const std::string chunk_prefix = SnapshotChunkPrefix(options_.prefix, seq);
  const std::string current = SnapshotCurrentKey(options_.prefix);
  etcd::Txn txn;
  txn.compare.push_back(etcd::Compare::CreateRevisionIs(leader_key_, options_.leader_revision));
  txn.failure.push_back(etcd::Op::Get(leader_key_));
  txn.success.push_back(etcd::Op::Put(current, EncodeSnapshotDescriptor(chunks_.descriptor)));
  txn.success.push_back(etcd::Op::Delete(options_.prefix + "/journal/", JournalKey(options_.prefix, seq + 1)));
  txn.success.push_back(etcd::Op::Delete(SnapshotPrefix(options_.prefix), chunk_prefix));
  txn.success.push_back(etcd::Op::Delete(etcd::PrefixEnd(chunk_prefix), current));
  return client_.Commit(txn).then([this](Result<etcd::TxnResult> result) { OnAnswer(std::move(result)); });
}

void EtcdSnapshotWriter::OnAnswer(Result<etcd::TxnResult> result) {
  if (failed_ || journal_.failed()) return;
  const uint64_t seq = chunks_.descriptor.seq;
  if (!result.ok()) {
    if (result.status().code() == StatusCode::kUnavailable) {
      // Each step is idempotent: send it again.
      ++stats_.snapshot_retries;
      tasks_.add(io_.timer()
                     .afterDelay(options_.retry_delay.count() * kj::MILLISECONDS)
                     .then([this]() { return Send(); }));
      return;
    }
    GiveUp(result.status());
    return;
  }
  if (!result->succeeded) {
    std::string holder = "(absent)";
    int64_t revision = 0;
    if (!result->responses.empty() && !result->responses[0].range.kvs.empty()) {
      revision = result->responses[0].range.kvs[0].create_revision;
      holder = "by " + result->responses[0].range.kvs[0].value;
    }
    failed_ = true;
    Status fenced = FailedPreconditionError(
        "fenced: " + leader_key_ + " was created at revision " + std::to_string(revision) + " " + holder +
        ", our leadership is revision " + std::to_string(options_.leader_revision) +
        "; the etcd snapshot at record " + std::to_string(seq) + " was not made current");
    Log(LogLevel::kError, "etcd snapshot: ", fenced.ToString().c_str());
    if (on_failure_) on_failure_(fenced);
    return;
  }
  switch (step_) {
    case Step::kClear:
      stats_.snapshot_keys_deleted += result->responses.empty() ? 0 : result->responses[0].deleted;
      step_ = chunks_.values.empty() ? Step::kSwitch : Step::kChunk;
      break;
    case Step::kChunk:
      ++stats_.snapshot_chunks;
      stats_.snapshot_bytes += chunks_.values[chunk_].size();
      if (++chunk_ == chunks_.values.size()) {
        step_ = Step::kSwitch;
        if (options_.kill_before_switch != 0 && attempts_ == options_.kill_before_switch) {
          Log(LogLevel::kWarning, "test hook: killed after the chunks of the etcd snapshot at record ", seq,
              ", before its switch");
          raise(SIGKILL);
        }
      }
      break;
    case Step::kSwitch: {
      uint64_t deleted = 0;
      for (const etcd::OpResult& r : result->responses) deleted += r.deleted;
      stats_.snapshot_keys_deleted += deleted;
      ++stats_.snapshots_written;
      stats_.last_snapshot_seq = seq;
      stats_.snapshot_seconds.Observe(static_cast<double>(uv_hrtime() - started_ns_) * 1e-9);
      Log(LogLevel::kInfo, "etcd snapshot at record ", seq, " is current (revision ", result->revision,
          "); deleted ", deleted, " journal and old snapshot keys");
      tasks_.add(Compact(result->revision));
      return;
    }
  }
  tasks_.add(Send());
}

kj::Promise<void> EtcdSnapshotWriter::Compact(int64_t revision) {
  return client_.Compact(revision, /*physical=*/true).then([this, revision](Result<int64_t> compacted) {
    if (compacted.ok()) {
      ++stats_.compactions;
    } else {
      // Housekeeping only: the next switch compacts again.
      ++stats_.compaction_failures;
      Log(LogLevel::kWarning, "etcd compaction at revision ", revision, " failed: ",
          compacted.status().ToString().c_str());
    }
    Done();
  });
}

void EtcdSnapshotWriter::GiveUp(const Status& why) {
  ++stats_.snapshot_failures;
  Log(LogLevel::kWarning, "etcd snapshot at record ", seq_, " given up (the journal keeps every record): ",
      why.ToString().c_str());
  Done();
}

void EtcdSnapshotWriter::Done() {
  busy_ = false;
  chunks_ = SnapshotChunks();
  MaybeStart();
}

void EtcdSnapshotWriter::taskFailed(kj::Exception&& exception) {
  GiveUp(InternalError(std::string("etcd snapshot task failed: ") + exception.getDescription().cStr()));
}

}  // namespace dispatch::ha
