// Store's journal, snapshot and dataset operations. Writes follow one pattern:
// validate (bad input changes nothing), BEGIN IMMEDIATE, write, COMMIT; any
// SQLite failure after validation is fail-stop (see FailStop).
#include "storage/store.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "storage/format.h"

namespace dispatch::storage {
namespace {

std::string Range(uint64_t first, uint64_t last) {
  return first == last ? "record " + std::to_string(first)
                       : "records " + std::to_string(first) + ".." + std::to_string(last);
}

}  // namespace

Status Store::ValidateBatch(const JournalBatch& batch) const {
  const std::vector<std::string>& records = batch.records();
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i].size() > options_.max_record_bytes) {
      return ResourceExhaustedError(
          "journal record " + std::to_string(last_seq_ + 1 + i) + " is " +
          std::to_string(records[i].size()) + " bytes, over the limit of " +
          std::to_string(options_.max_record_bytes) + "; nothing of its batch was written");
    }
  }
  for (const DatasetPut& put : batch.dataset_puts()) {
    if (put.key.empty()) {
      return InvalidArgumentError(
          "a dataset definition has an empty key; nothing of its batch "
          "was written");
    }
    if (put.key.size() > options_.max_record_bytes) {
      return ResourceExhaustedError("dataset key of " + std::to_string(put.key.size()) +
                                    " bytes is over the limit of " +
                                    std::to_string(options_.max_record_bytes));
    }
    if (put.definition.size() > options_.max_dataset_bytes) {
      return ResourceExhaustedError(
          "dataset " + QuoteKey(put.key) + " has a definition of " +
          std::to_string(put.definition.size()) + " bytes, over the limit of " +
          std::to_string(options_.max_dataset_bytes) + "; nothing of its batch was written");
    }
  }
  for (const ResultPut& put : batch.result_puts()) {
    if (put.bytes.size() > options_.max_result_bytes) {
      return ResourceExhaustedError(
          "the result of closure " + std::to_string(put.closure_id) + " is " +
          std::to_string(put.bytes.size()) + " bytes, over the limit of " +
          std::to_string(options_.max_result_bytes) + "; nothing of its batch was written");
    }
  }
  return Status::Ok();
}

Result<uint64_t> Store::Commit(const JournalBatch& batch) {
  if (failed()) return failure_;
  if (in_replay_) return InternalError("Store::Commit called from inside a Replay callback");
  DISPATCH_RETURN_IF_ERROR(ValidateBatch(batch));
  if (batch.empty()) return last_seq_;
  const uint64_t first = last_seq_ + 1;
  // The next slice of records the snapshot covers goes in this transaction.
  uint64_t truncate_through = 0;
  if (journal_first_seq_ <= snapshot_seq_ && options_.truncate_records_per_commit > 0) {
    auto slice_end = TruncationSliceEnd(batch.payload_bytes());
    if (!slice_end.ok()) return FailStop(slice_end.status());
    truncate_through = *slice_end;
  }
  Status status = WriteBatch(batch, first, truncate_through);
  if (!status.ok()) return FailStop(std::move(status));
  if (journal_first_seq_ > last_seq_) journal_first_seq_ = first;  // the journal was empty
  last_seq_ += batch.record_count();
  if (truncate_through > 0) journal_first_seq_ = truncate_through + 1;
  if (!defers_sync()) WriteMark(last_seq_, options_.synchronous == Synchronous::kFull);
  return last_seq_;
}

Result<uint64_t> Store::TruncationSliceEnd(size_t batch_bytes) {
  const uint64_t last =
      std::min(snapshot_seq_, journal_first_seq_ + options_.truncate_records_per_commit - 1);
  if (options_.truncate_bytes_per_commit == 0) return last;
  const uint64_t budget =
      std::max<uint64_t>(options_.truncate_bytes_per_commit, 2 * static_cast<uint64_t>(batch_bytes));
  ScopedReset reset(select_record_sizes_);
  select_record_sizes_.BindInt(1, static_cast<int64_t>(journal_first_seq_));
  select_record_sizes_.BindInt(2, static_cast<int64_t>(last));
  uint64_t through = 0;  // none yet: the first record is taken whatever its size
  uint64_t bytes = 0;
  for (;;) {
    const int rc = select_record_sizes_.Step();
    if (rc == SQLITE_DONE) return last;
    if (rc != SQLITE_ROW) {
      return SqliteStatus(db_.get(), rc,
                          "reading the sizes of journal records " + Range(journal_first_seq_, last) +
                              " in " + db_path_ + " (covered by the snapshot)");
    }
    const uint64_t size = static_cast<uint64_t>(select_record_sizes_.ColumnInt(1));
    if (through != 0 && bytes + size > budget) return through;
    bytes += size;
    through = static_cast<uint64_t>(select_record_sizes_.ColumnInt(0));
  }
}

void Store::WriteMark(uint64_t seq, bool synced) {
  if (mark_ != nullptr && !mark_->Write(seq, synced)) ++mark_write_failures_;
}

void Store::NoteDurable(uint64_t seq) {
  if (failed()) return;
  WriteMark(std::min(seq, last_seq_), /*synced=*/true);
}

Status Store::WriteBatch(const JournalBatch& batch, uint64_t first_seq, uint64_t truncate_through) {
  sqlite3* db = db_.get();
  // Error text is built only on failure: this is the hot path.
  auto what = [&](const std::string& step) {
    const uint64_t last_seq = first_seq + batch.record_count() - 1;
    return "committing " +
           (batch.record_count() > 0 ? "journal " + Range(first_seq, last_seq)
                                     : std::string("dataset definitions and results")) +
           " to " + db_path_ + " (" + step + ")";
  };
  int rc = begin_.Step();
  begin_.Reset();
  if (rc != SQLITE_DONE) return SqliteStatus(db, rc, what("BEGIN"));

  uint64_t seq = first_seq;
  for (const std::string& record : batch.records()) {
    insert_record_.BindInt(1, static_cast<int64_t>(seq));
    insert_record_.BindInt(2, RecordChecksum(seq, record));
    insert_record_.BindBlob(3, record);
    rc = insert_record_.Step();
    insert_record_.Reset();
    if (rc != SQLITE_DONE) {
      return SqliteStatus(db, rc, what("writing record " + std::to_string(seq)));
    }
    ++seq;
  }
  for (const DatasetPut& put : batch.dataset_puts()) {
    put_dataset_.BindBlob(1, put.key);
    put_dataset_.BindInt(2, DatasetChecksum(put.key, put.definition));
    put_dataset_.BindBlob(3, put.definition);
    rc = put_dataset_.Step();
    put_dataset_.Reset();
    if (rc != SQLITE_DONE) {
      return SqliteStatus(db, rc, what("writing dataset " + QuoteKey(put.key)));
    }
  }
  for (const ResultPut& put : batch.result_puts()) {
    rows_to_delete_.erase(put.closure_id);  // stored again (an HA install)
    put_result_.BindInt(1, static_cast<int64_t>(put.closure_id));
    put_result_.BindInt(2, ResultChecksum(put.closure_id, put.bytes));
    put_result_.BindBlob(3, put.bytes);
    rc = put_result_.Step();
    put_result_.Reset();
    if (rc != SQLITE_DONE) {
      return SqliteStatus(db, rc,
                          what("writing the result of closure " + std::to_string(put.closure_id)));
    }
  }
  for (uint64_t closure_id : batch.result_deletes()) rows_to_delete_.insert(closure_id);
  DISPATCH_RETURN_IF_ERROR(DeleteRowSlice());
  if (truncate_through > 0) {
    truncate_journal_.BindInt(1, static_cast<int64_t>(truncate_through));
    rc = truncate_journal_.Step();
    truncate_journal_.Reset();
    if (rc != SQLITE_DONE) {
      return SqliteStatus(db, rc,
                          what("deleting journal records up to " + std::to_string(truncate_through) +
                               ", covered by the snapshot"));
    }
  }
  rc = commit_.Step();
  commit_.Reset();
  if (rc != SQLITE_DONE) return SqliteStatus(db, rc, what("COMMIT"));
  return Status::Ok();
}

Status Store::DeleteRowSlice() {
  sqlite3* db = db_.get();
  const uint64_t budget = options_.result_delete_bytes_per_commit;
  uint64_t bytes = 0;
  auto it = rows_to_delete_.begin();
  // The first row goes whatever its size.
  while (it != rows_to_delete_.end() && (budget == 0 || bytes < budget)) {
    const uint64_t closure_id = *it;
    const std::string what = "deleting the released result of closure " +
                             std::to_string(closure_id) + " from " + db_path_;
    {
      // length() reads the row's header, not its pages.
      ScopedReset reset(get_result_);
      get_result_.BindInt(1, static_cast<int64_t>(closure_id));
      const int rc = get_result_.Step();
      if (rc == SQLITE_ROW) {
        bytes += static_cast<uint64_t>(get_result_.ColumnInt(1));
      } else if (rc != SQLITE_DONE) {
        return SqliteStatus(db, rc, what);
      }
    }
    delete_result_.BindInt(1, static_cast<int64_t>(closure_id));
    const int rc = delete_result_.Step();
    delete_result_.Reset();
    if (rc != SQLITE_DONE) return SqliteStatus(db, rc, what);
    it = rows_to_delete_.erase(it);
  }
  return Status::Ok();
}

Status Store::DeleteReleasedRows() {
  if (failed()) return failure_;
  if (rows_to_delete_.empty()) return Status::Ok();
  sqlite3* db = db_.get();
  int rc = begin_.Step();
  begin_.Reset();
  if (rc != SQLITE_DONE) return FailStop(SqliteStatus(db, rc, "deleting released results (BEGIN)"));
  Status status = DeleteRowSlice();
  if (!status.ok()) return FailStop(std::move(status));
  rc = commit_.Step();
  commit_.Reset();
  if (rc != SQLITE_DONE) return FailStop(SqliteStatus(db, rc, "deleting released results (COMMIT)"));
  return Status::Ok();
}

Status Store::FailStop(Status status) {
  // SQLite may already have rolled back (it does on SQLITE_FULL and some I/O
  // errors); if a transaction is still open, roll it back so nothing of the
  // failed batch can be committed later by accident. Its own failure does not
  // matter: we never write again.
  if (sqlite3_get_autocommit(db_.get()) == 0) {
    rollback_.Step();
    rollback_.Reset();
  }
  failure_ = std::move(status);
  return failure_;
}

Status Store::Replay(uint64_t after_seq, const RecordFn& fn) {
  if (after_seq > last_seq_) {
    return InvalidArgumentError("cannot replay the journal of " + db_path_ + " after record " +
                                std::to_string(after_seq) + ": the last record is " +
                                std::to_string(last_seq_));
  }
  if (after_seq < snapshot_seq_) {
    return FailedPreconditionError(
        "cannot replay the journal of " + db_path_ + " after record " + std::to_string(after_seq) +
        ": records up to " + std::to_string(snapshot_seq_) + " exist only in the snapshot at " +
        std::to_string(snapshot_seq_));
  }
  sqlite3* db = db_.get();
  in_replay_ = true;
  ScopedReset reset(select_records_);
  select_records_.BindInt(1, static_cast<int64_t>(after_seq));
  uint64_t expected = after_seq + 1;
  Status status;
  while (status.ok()) {
    const int rc = select_records_.Step();
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      status = SqliteStatus(
          db, rc, "reading journal record " + std::to_string(expected) + " of " + db_path_);
      if (status.code() == StatusCode::kDataLoss) {
        status = DataLossError("journal database " + db_path_ + " is damaged at or after record " +
                               std::to_string(expected) + ": " + status.message());
      }
      break;
    }
    const uint64_t seq = static_cast<uint64_t>(select_records_.ColumnInt(0));
    if (seq != expected) {
      status = DataLossError("journal of " + db_path_ + " is missing " + Range(expected, seq - 1) +
                             " (the next record present is " + std::to_string(seq) + ")");
      break;
    }
    const std::string_view body = select_records_.ColumnBlob(2);
    const uint32_t stored = static_cast<uint32_t>(select_records_.ColumnInt(1));
    const uint32_t computed = RecordChecksum(seq, body);
    if (select_records_.ColumnInt(1) != static_cast<int64_t>(stored) || stored != computed) {
      status = DataLossError("journal record " + std::to_string(seq) + " in " + db_path_ +
                             " fails its checksum (stored " +
                             std::to_string(select_records_.ColumnInt(1)) + ", computed " +
                             std::to_string(computed) + "): the record is damaged");
      break;
    }
    status = fn(seq, body);
    if (!status.ok()) {
      status = Status(status.code(),
                      "replaying journal record " + std::to_string(seq) + ": " + status.message());
      break;
    }
    ++expected;
  }
  in_replay_ = false;
  if (status.ok() && expected != last_seq_ + 1) {
    status = DataLossError("journal of " + db_path_ + " is missing " + Range(expected, last_seq_) +
                           " at its end");
  }
  return status;
}

Status Store::WriteSnapshot(uint64_t seq, std::string_view bytes) {
  if (failed()) return failure_;
  if (in_replay_) return InternalError("Store::WriteSnapshot called from inside a Replay callback");
  if (seq > last_seq_ || (has_snapshot_ && seq < snapshot_seq_)) {
    return InvalidArgumentError("cannot write a snapshot at record " + std::to_string(seq) +
                                ": it must lie between the latest snapshot (" +
                                std::to_string(snapshot_seq_) + ") and the last record (" +
                                std::to_string(last_seq_) + ")");
  }
  if (bytes.size() > options_.max_snapshot_bytes) {
    return ResourceExhaustedError("snapshot at record " + std::to_string(seq) + " is " +
                                  std::to_string(bytes.size()) + " bytes, over the limit of " +
                                  std::to_string(options_.max_snapshot_bytes));
  }
  auto info = WriteSnapshotFile(options_.work_dir, seq, bytes);
  if (!info.ok()) return info.status();
  auto obsolete = RecordSnapshot(*info);
  if (!obsolete.ok()) return obsolete.status();
  if (defers_sync()) {
    // The older files may go only once the record naming the new one is
    // durable. Synced here, on the calling thread (start-up, shutdown).
    auto syncer = NewWalSyncer();
    Status synced = syncer.ok() ? (*syncer)->Sync() : syncer.status();
    if (!synced.ok()) return FailSync(std::move(synced));
    NoteDurable(last_seq_);
  }
  for (const std::string& name : *obsolete) unlink((options_.work_dir + "/" + name).c_str());
  return Status::Ok();
}

Status Store::InstallSnapshot(uint64_t seq, std::string_view bytes, const JournalBatch& tables) {
  if (failed()) return failure_;
  if (last_seq_ != 0 || has_snapshot_ || journal_first_seq_ != 1) {
    return FailedPreconditionError("cannot install a snapshot at record " + std::to_string(seq) + " into " +
                                   db_path_ + ": it is not empty (last record " + std::to_string(last_seq_) +
                                   ", snapshot at " + std::to_string(snapshot_seq_) + ")");
  }
  if (!tables.records().empty()) {
    return InvalidArgumentError("the tables installed with a snapshot carry no journal records");
  }
  if (bytes.size() > options_.max_snapshot_bytes) {
    return ResourceExhaustedError("snapshot at record " + std::to_string(seq) + " is " +
                                  std::to_string(bytes.size()) + " bytes, over the limit of " +
                                  std::to_string(options_.max_snapshot_bytes));
  }
  DISPATCH_RETURN_IF_ERROR(ValidateBatch(tables));
  auto info = WriteSnapshotFile(options_.work_dir, seq, bytes);
  if (!info.ok()) return info.status();
  // Two transactions: a crash between them leaves a cache that the next
  // takeover empties anyway (only HA mode installs).
  if (!tables.empty()) {
    Status written = WriteBatch(tables, 1, 0);
    if (!written.ok()) return FailStop(std::move(written));
  }
  std::vector<std::string> obsolete;
  Status status = RecordSnapshotTransaction(*info, &obsolete);
  if (!status.ok()) return FailStop(std::move(status));
  has_snapshot_ = true;
  snapshot_seq_ = seq;
  last_seq_ = seq;
  journal_first_seq_ = seq + 1;
  snapshot_file_ = info->name;
  latest_snapshot_ = *info;
  WriteMark(seq, options_.synchronous == Synchronous::kFull);
  return Status::Ok();
}

Result<std::vector<std::string>> Store::RecordSnapshot(const SnapshotFileInfo& info) {
  if (failed()) return failure_;
  if (in_replay_) return InternalError("Store::RecordSnapshot called from inside a Replay callback");
  if (info.seq > last_seq_ || (has_snapshot_ && info.seq < snapshot_seq_)) {
    return InvalidArgumentError("cannot record a snapshot at record " + std::to_string(info.seq) +
                                ": it must lie between the latest snapshot (" +
                                std::to_string(snapshot_seq_) + ") and the last record (" +
                                std::to_string(last_seq_) + ")");
  }
  std::vector<std::string> obsolete;
  Status status = RecordSnapshotTransaction(info, &obsolete);
  if (!status.ok()) return FailStop(std::move(status));
  has_snapshot_ = true;
  snapshot_seq_ = info.seq;
  // An identical snapshot recorded again keeps its (same) file.
  if (snapshot_file_ != info.name && !snapshot_file_.empty() &&
      std::find(obsolete.begin(), obsolete.end(), snapshot_file_) == obsolete.end()) {
    obsolete.push_back(snapshot_file_);
  }
  obsolete.erase(std::remove(obsolete.begin(), obsolete.end(), info.name), obsolete.end());
  snapshot_file_ = info.name;
  latest_snapshot_ = info;
  return obsolete;
}

Status Store::RecordSnapshotTransaction(const SnapshotFileInfo& info,
                                        std::vector<std::string>* obsolete) {
  sqlite3* db = db_.get();
  const std::string what = "recording the snapshot at record " + std::to_string(info.seq) +
                           " (" + info.name + ") in " + db_path_;
  int rc = begin_.Step();
  begin_.Reset();
  if (rc != SQLITE_DONE) return SqliteStatus(db, rc, what + " (BEGIN)");
  insert_snapshot_.BindInt(1, static_cast<int64_t>(info.seq));
  sqlite3_bind_text(insert_snapshot_.get(), 2, info.name.data(), static_cast<int>(info.name.size()),
                    SQLITE_STATIC);
  insert_snapshot_.BindInt(3, static_cast<int64_t>(info.size));
  insert_snapshot_.BindInt(4, info.crc);
  rc = insert_snapshot_.Step();
  insert_snapshot_.Reset();
  if (rc != SQLITE_DONE) return SqliteStatus(db, rc, what);
  {
    ScopedReset reset(select_old_snapshots_);
    select_old_snapshots_.BindInt(1, static_cast<int64_t>(info.seq));
    while ((rc = select_old_snapshots_.Step()) == SQLITE_ROW) {
      obsolete->emplace_back(select_old_snapshots_.ColumnBlob(0));
    }
    if (rc != SQLITE_DONE) return SqliteStatus(db, rc, what + " (listing older snapshots)");
  }
  delete_old_snapshots_.BindInt(1, static_cast<int64_t>(info.seq));
  rc = delete_old_snapshots_.Step();
  delete_old_snapshots_.Reset();
  if (rc != SQLITE_DONE) return SqliteStatus(db, rc, what + " (forgetting older snapshots)");
  rc = commit_.Step();
  commit_.Reset();
  if (rc != SQLITE_DONE) return SqliteStatus(db, rc, what + " (COMMIT)");
  return Status::Ok();
}

Result<std::optional<Snapshot>> Store::LoadLatestSnapshot() {
  SnapshotFileInfo info;
  {
    ScopedReset reset(select_snapshot_);
    const int rc = select_snapshot_.Step();
    if (rc == SQLITE_DONE) {
      if (has_snapshot_) {
        return DataLossError("the snapshot at record " + std::to_string(snapshot_seq_) + " in " +
                             db_path_ + " has disappeared");
      }
      return std::optional<Snapshot>();
    }
    if (rc != SQLITE_ROW) {
      return SqliteStatus(db_.get(), rc, "reading the latest snapshot of " + db_path_);
    }
    info.seq = static_cast<uint64_t>(select_snapshot_.ColumnInt(0));
    info.name = std::string(select_snapshot_.ColumnBlob(1));
    const int64_t size = select_snapshot_.ColumnInt(2);
    const int64_t crc = select_snapshot_.ColumnInt(3);
    if (size < 0 || crc < 0 || crc > 0xFFFFFFFFll || !IsSnapshotFileName(info.name) ||
        info.name.find('/') != std::string::npos) {
      return DataLossError("the snapshot record at record " + std::to_string(info.seq) + " in " +
                           db_path_ + " is damaged (file '" + info.name + "', " +
                           std::to_string(size) + " bytes)");
    }
    info.size = static_cast<uint64_t>(size);
    info.crc = static_cast<uint32_t>(crc);
  }
  if (info.size > options_.max_snapshot_bytes) {
    return DataLossError("snapshot file " + options_.work_dir + "/" + info.name + " is recorded as " +
                         std::to_string(info.size) + " bytes, over the limit of " +
                         std::to_string(options_.max_snapshot_bytes));
  }
  auto body = ReadSnapshotFile(options_.work_dir, info);
  if (!body.ok()) return body.status();
  Snapshot snapshot;
  snapshot.seq = info.seq;
  snapshot.bytes = std::move(body).value();
  snapshot.file = info.name;
  return std::optional<Snapshot>(std::move(snapshot));
}

Result<std::string> Store::GetDataset(std::string_view key) {
  ScopedReset reset(get_dataset_);
  get_dataset_.BindBlob(1, key);
  const int rc = get_dataset_.Step();
  if (rc == SQLITE_DONE) {
    return NotFoundError("dataset " + QuoteKey(key) + " is not in the dataset store of " +
                         db_path_);
  }
  if (rc != SQLITE_ROW) {
    return SqliteStatus(db_.get(), rc, "reading dataset " + QuoteKey(key) + " from " + db_path_);
  }
  const std::string_view body = get_dataset_.ColumnBlob(1);
  const int64_t stored = get_dataset_.ColumnInt(0);
  const uint32_t computed = DatasetChecksum(key, body);
  if (stored != static_cast<int64_t>(computed)) {
    return DataLossError("dataset " + QuoteKey(key) + " in " + db_path_ +
                         " fails its checksum (stored " + std::to_string(stored) + ", computed " +
                         std::to_string(computed) + ")");
  }
  return std::string(body);
}

Result<std::string> Store::GetResult(uint64_t closure_id) {
  int64_t size = 0;
  {
    ScopedReset reset(get_result_);
    get_result_.BindInt(1, static_cast<int64_t>(closure_id));
    const int rc = get_result_.Step();
    if (rc == SQLITE_DONE) {
      return NotFoundError("the result of closure " + std::to_string(closure_id) +
                           " is not in the result table of " + db_path_);
    }
    if (rc != SQLITE_ROW) {
      return SqliteStatus(db_.get(), rc,
                          "reading the result of closure " + std::to_string(closure_id));
    }
    size = get_result_.ColumnInt(1);
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  DISPATCH_RETURN_IF_ERROR(
      ReadResultRow(db_.get(), get_result_, db_path_, closure_id, bytes.data(), bytes.size()));
  return bytes;
}

Status Store::ReadResultAt(const ResultLocation& location, char* dest) {
  return storage::ReadResultAt(db_.get(), get_result_, db_path_, result_dir(), location, dest);
}

Result<std::vector<uint64_t>> Store::ListResults() {
  std::vector<uint64_t> ids;
  ScopedReset reset(list_results_);
  while (true) {
    const int rc = list_results_.Step();
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      return SqliteStatus(db_.get(), rc, "listing the stored closure results of " + db_path_);
    }
    ids.push_back(static_cast<uint64_t>(list_results_.ColumnInt(0)));
  }
  return ids;
}

}  // namespace dispatch::storage
