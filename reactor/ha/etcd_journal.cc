#include "reactor/ha/etcd_journal.h"

#include <uv.h>

#include <algorithm>

#include <kj/debug.h>

#include "common/log.h"
#include "common/rpc_status.h"
#include "reactor/ha/etcd_snapshot_writer.h"
#include "reactor/ha/wire/journal_group_codec.h"

namespace dispatch::ha {

EtcdJournal::EtcdJournal(uvkj::UvAsyncIo& io, etcd::EtcdClient& client, EtcdJournalOptions options,
                         std::function<void(const Status&)> on_failure)
    : io_(io),
      client_(client),
      options_(std::move(options)),
      on_failure_(std::move(on_failure)),
      leader_key_(options_.prefix + "/leader") {}

EtcdJournal::~EtcdJournal() noexcept(false) = default;

Status EtcdJournal::Admit() {
  if (failed_) return UnavailableError("the etcd journal failed: this dispatcher no longer leads");
  if (queued_bytes_ <= options_.max_queued_bytes) return Status::Ok();
  ++stats_.refused_backlog;
  return UnavailableError("the etcd journal is behind: " + std::to_string(queued_bytes_) +
                          " bytes wait for etcd (limit " + std::to_string(options_.max_queued_bytes) +
                          " bytes); nothing was changed, retry later");
}

void EtcdJournal::Written(uint64_t write, const JournalBatch* pass, uint64_t first_seq) {
  if (failed_) return;
  if (pass == nullptr) {
    // No records (a local snapshot's record): in etcd once everything
    // before it is.
    if (groups_.empty()) {
      durable_ = write;
      if (listener() != nullptr) listener()->OnStageAdvanced();
    } else {
      groups_.back().last_write = write;
    }
    return;
  }
  const JournalBatch& batch = *pass;
  const size_t bytes = EstimatePassBytes(batch);
  if (bytes > options_.max_group_bytes) {
    // Submit's limits make this impossible: a bug, never a peer's doing.
    Fatal(InternalError("BUG: one group commit of " + std::to_string(bytes) +
                        " bytes does not fit one etcd transaction (kMaxEtcdBatchBytes " +
                        std::to_string(options_.max_group_bytes) + ")"));
    return;
  }
  // The open group is the last one, unless it is the one in flight.
  const bool can_join = !groups_.empty() && !(in_flight_ && groups_.size() == 1) && !groups_.back().closed;
  if (can_join && groups_.back().bytes + bytes > options_.max_group_bytes) ++stats_.groups_split;
  if (!can_join || groups_.back().bytes + bytes > options_.max_group_bytes) {
    Group group;
    group.first_seq = first_seq;
    group.next_seq = first_seq;
    groups_.push_back(std::move(group));
    stats_.groups_queued_max = std::max<uint64_t>(stats_.groups_queued_max, groups_.size());
  }
  Group& open = groups_.back();
  KJ_ASSERT(open.next_seq == first_seq, "passes must be appended in sequence", open.next_seq, first_seq);
  auto copy = std::make_unique<JournalBatch>();
  for (const std::string& r : batch.records()) copy->AddRecord(r);
  for (const auto& d : batch.dataset_puts()) copy->PutDataset(d.key, d.definition);
  for (const auto& r : batch.result_puts()) copy->PutResult(r.closure_id, r.bytes);
  for (uint64_t id : batch.result_deletes()) copy->DeleteResult(id);
  open.next_seq += batch.record_count();
  open.bytes += bytes;
  queued_bytes_ += bytes;
  open.passes.push_back(std::move(copy));
  open.last_write = write;
  if (!in_flight_) SendFront();
}

kj::Promise<void> EtcdJournal::Barrier() {
  if (failed_) return KJ_EXCEPTION(DISCONNECTED, "the etcd journal failed");
  if (groups_.empty()) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  barriers_.emplace_back(groups_.back().last_write, kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

void EtcdJournal::SendFront() {
  if (failed_ || in_flight_ || groups_.empty()) return;
  Group& group = groups_.front();
  in_flight_ = true;
  queued_bytes_ -= std::min(queued_bytes_, group.bytes);
  std::vector<const JournalBatch*> passes;
  for (const auto& pass : group.passes) passes.push_back(pass.get());
  group.value = EncodeJournalGroup(group.first_seq, passes);
  group.passes.clear();  // the value holds them now
  if (group.value.size() > options_.max_group_bytes) {
    Fatal(InternalError("BUG: a journal group encoded to " + std::to_string(group.value.size()) +
                        " bytes, over kMaxEtcdBatchBytes " + std::to_string(options_.max_group_bytes)));
    return;
  }
  tasks_.add(Send(group));
}

kj::Promise<void> EtcdJournal::Send(Group& group) {
  const std::string key = JournalKey(options_.prefix, group.first_seq);
  etcd::Txn txn;
  txn.compare.push_back(etcd::Compare::CreateRevisionIs(leader_key_, options_.leader_revision));
  txn.compare.push_back(etcd::Compare::VersionIs(key, 0));
  txn.success.push_back(etcd::Op::Put(key, group.value));
  txn.failure.push_back(etcd::Op::Get(leader_key_));
  txn.failure.push_back(etcd::Op::Get(key));
  group.sent_ns = uv_hrtime();
  return client_.Commit(txn).then([this](Result<etcd::TxnResult> result) { OnAnswer(std::move(result)); });
}

void EtcdJournal::OnAnswer(Result<etcd::TxnResult> result) {
  if (failed_ || groups_.empty()) return;
  Group& group = groups_.front();
  const std::string key = JournalKey(options_.prefix, group.first_seq);
  if (!result.ok()) {
    if (result.status().code() == StatusCode::kUnavailable) {
      // It may or may not have landed: send the same again (the slot
      // compare makes that safe). A lost lease ends this through the
      // election (on_failure), not here.
      ++stats_.transaction_retries;
      Log(LogLevel::kWarning, "etcd journal transaction for ", key.c_str(), " unanswered (",
          result.status().ToString().c_str(), "); sending it again");
      tasks_.add(io_.timer()
                     .afterDelay(options_.retry_delay.count() * kj::MILLISECONDS)
                     .then([this]() -> kj::Promise<void> {
                       if (failed_ || groups_.empty()) return kj::READY_NOW;
                       return Send(groups_.front());
                     }));
      return;
    }
    Fatal(UnavailableError("the etcd journal refused " + key + ": " + result.status().ToString()));
    return;
  }
  if (result->succeeded) {
    Acknowledged();
    return;
  }
  // The failure branch: who leads, and what the slot holds.
  int64_t leader_revision = 0;
  std::string leader_value;
  std::string slot_value;
  bool slot_taken = false;
  if (result->responses.size() >= 2) {
    if (!result->responses[0].range.kvs.empty()) {
      leader_revision = result->responses[0].range.kvs[0].create_revision;
      leader_value = result->responses[0].range.kvs[0].value;
    }
    if (!result->responses[1].range.kvs.empty()) {
      slot_taken = true;
      slot_value = result->responses[1].range.kvs[0].value;
    }
  }
  if (leader_revision == options_.leader_revision && slot_taken && slot_value == group.value) {
    Acknowledged();  // a retry whose first attempt had landed
    return;
  }
  if (leader_revision != options_.leader_revision) {
    Fatal(FailedPreconditionError(
        "fenced: " + leader_key_ + " was created at revision " + std::to_string(leader_revision) +
        (leader_value.empty() ? std::string(" (absent)") : " by " + leader_value) +
        ", our leadership is revision " + std::to_string(options_.leader_revision) +
        "; another dispatcher leads, nothing of " + key + " was acknowledged"));
    return;
  }
  Fatal(FailedPreconditionError("fenced: the etcd journal slot " + key +
                                " already holds another value; nothing of it was acknowledged"));
}

void EtcdJournal::Acknowledged() {
  Group group = std::move(groups_.front());
  groups_.pop_front();
  in_flight_ = false;
  const uint64_t now = uv_hrtime();
  acknowledged_seq_ = group.next_seq - 1;
  ++stats_.transactions;
  stats_.bytes += group.value.size();
  stats_.records += group.next_seq - group.first_seq;
  stats_.transaction_seconds.Observe(static_cast<double>(now - group.sent_ns) * 1e-9);
  stats_.bytes_per_transaction.Observe(static_cast<double>(group.value.size()));
  stats_.records_per_transaction.Observe(static_cast<double>(group.next_seq - group.first_seq));
  // Sent before the replies go, so the next round trip starts at once.
  SendFront();
  durable_ = group.last_write;
  while (!barriers_.empty() && barriers_.front().first <= durable_) {
    barriers_.front().second->fulfill();
    barriers_.pop_front();
  }
  if (listener() != nullptr) listener()->OnStageAdvanced();
}

void EtcdJournal::SnapshotStarted(uint64_t seq) {
  if (!groups_.empty() && groups_.back().next_seq == seq + 1) groups_.back().closed = true;
  if (snapshot_writer_ != nullptr) snapshot_writer_->Started(seq);
}

void EtcdJournal::SnapshotEnded(uint64_t seq, const storage::SnapshotFileInfo* recorded) {
  if (snapshot_writer_ != nullptr) snapshot_writer_->Ended(seq, recorded);
}

void EtcdJournal::Fatal(const Status& status) {
  if (failed_) return;
  Log(LogLevel::kError, "etcd journal: ", status.ToString().c_str());
  Fail(status);
  if (on_failure_) on_failure_(status);
}

void EtcdJournal::Fail(const Status& status) {
  if (failed_) return;
  failed_ = true;
  for (auto& [write, fulfiller] : barriers_) fulfiller->reject(ExceptionFromStatus(status));
  barriers_.clear();
  groups_.clear();
  queued_bytes_ = 0;
  in_flight_ = false;
}

void EtcdJournal::taskFailed(kj::Exception&& exception) {
  Fatal(InternalError(std::string("etcd journal task failed: ") + exception.getDescription().cStr()));
}

}  // namespace dispatch::ha
